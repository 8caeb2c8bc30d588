"""The ``solve`` command (one question with search) and the ``strategies`` command (list them).

``solve --tree FILE`` writes the search tree to FILE as node-link JSON (``.json``,
``.json.gz``) or GraphML (``.graphml``), by its suffix (:mod:`prmsearch.tree_graph`); a bare
``--tree`` with ``--json`` puts the tree into the printed JSON object instead (``"tree"``, the
:meth:`~prmsearch.SearchTree.to_dict` columns), as it always has.
"""

from __future__ import annotations

import argparse
import json
import sys

from prmsearch.cli.backends import add_backend_arguments, add_strategy_arguments, build_searcher, set_threads
from prmsearch.cli.errors import FlagError, flag_context
from prmsearch.search.protocol import STRATEGIES, strategy_spec


def read_question(question: str) -> str:
    """QUESTION as given, or standard input's text for ``-`` (a question longer than a shell
    argument can hold, about 128 KB, or one kept in a file)."""
    if question != "-":
        return question
    try:
        text = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FlagError("QUESTION", "-", f"standard input is not UTF-8 text ({exc.reason} at byte "
                        f"{exc.start}); give the question as UTF-8") from None
    return text.removesuffix("\n")


def check_question(question: str) -> None:
    """Refuse an empty or blank QUESTION before any model loads."""
    if not question.strip():
        raise FlagError("QUESTION", question[:40],
                        'is empty or blank; give the question, e.g. "What is 2+3?"')


#: ``--tree`` given without a FILE: put the tree into the ``--json`` output.
TREE_IN_JSON = "<in the JSON output>"


def check_tree_flag(args: argparse.Namespace) -> None:
    """``--tree``: a FILE with a known suffix, or bare with ``--json``; refused before models load."""
    if args.tree is None:
        return
    if args.tree == TREE_IN_JSON:
        if not args.json:
            raise FlagError("--tree", None, "without a FILE it adds the tree to --json output; add --json, "
                            "or give a file: --tree tree.json (or .json.gz, .graphml)")
        return
    from prmsearch.tree_graph import tree_suffix

    with flag_context("--tree", args.tree):
        tree_suffix(args.tree)


def write_tree_file(result, path: str) -> None:
    """Write ``result``'s tree to ``path`` (``--tree FILE``); a failure names ``--tree``."""
    from prmsearch.tree_graph import result_graph, write_tree_graph

    with flag_context("--tree", path, "give a writable .json, .json.gz or .graphml path"):
        write_tree_graph(result_graph(result), path)


def score_text(score: float | None) -> str:
    """A step score as printed: three decimals, or ``-`` for a step nothing scored."""
    return "-" if score is None or score != score else f"{score:.3f}"


#: Seconds between the progress lines a long ``solve`` prints on stderr.
PROGRESS_EVERY_S = 10.0


def search_with_progress(searcher, question: str, every_s: float | None):
    """``searcher(question)``; with ``every_s``, a line on stderr every ``every_s`` seconds saying
    how far the search has come (a real model on a CPU can take minutes)."""
    if every_s is None:
        return searcher(question)
    from concurrent.futures import TimeoutError as FutureTimeout

    with searcher.session() as session:
        future = session.submit(question)
        while True:
            try:
                return future.result(timeout=every_s)
            except FutureTimeout:
                done = session.progress(future)
                if done is not None:
                    print(f"searching: {done.nodes - 1} steps, {done.generated_tokens} tokens generated, "
                          f"{done.elapsed_s:.0f}s", file=sys.stderr, flush=True)


def cmd_solve(args: argparse.Namespace) -> int:
    args.question = read_question(args.question)
    check_question(args.question)
    check_tree_flag(args)
    set_threads(args.threads)
    searcher = build_searcher(args)
    quiet = args.json or args.quiet
    try:
        result = search_with_progress(searcher, args.question, None if quiet else PROGRESS_EVERY_S)
        print_result(args, result)
    finally:
        searcher.close()  # engines stop together, not one by one at exit
    return 1 if result.error else 0


def print_result(args: argparse.Namespace, result) -> None:
    """The solved question as ``solve`` prints it: JSON, or steps with scores, answer and cost."""
    if args.tree not in (None, TREE_IN_JSON):
        write_tree_file(result, args.tree)
    if args.json:
        print(json.dumps(result.to_dict(include_tree=args.tree == TREE_IN_JSON)))
    else:
        for i, (step, score) in enumerate(zip(result.steps, result.step_scores, strict=True), 1):
            print(f"[{i}] ({score_text(score)}) {step}")
        print(f"answer: {result.answer}")
        ledger = result.ledger
        print(
            f"cost: {ledger.generations} generations, {ledger.generated_tokens} tokens generated, "
            f"{ledger.prm_tokens_computed} PRM tokens, {ledger.flops:.3g} FLOPs, {ledger.wall_s:.2f}s"
        )
        if result.report:  # what the strategy said it did (e.g. the planner's bin and arm)
            print(f"{result.strategy}: " + ", ".join(f"{k} {v}" for k, v in result.report.items()))
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        if result.error:
            print(f"error: {result.error}", file=sys.stderr)


def cmd_strategies(args: argparse.Namespace) -> int:
    rows = []
    for name in STRATEGIES.names():
        spec = strategy_spec(name)
        rows.append({"name": name, "summary": spec.summary, "options": spec.options()})
    if args.json:
        print(json.dumps([{**r, "options": [list(o) for o in r["options"]]} for r in rows], default=str))
        return 0
    for row in rows:
        print(f"{row['name']}: {row['summary']}")
        for name, default, _ in row["options"]:
            print(f"    {name} = {default}")
    return 0


def _add_solve(sub) -> None:
    solve = sub.add_parser("solve", help="solve one question with search")
    solve.add_argument("question", help="the question, in quotes; - reads it from standard input")
    add_strategy_arguments(solve)
    add_backend_arguments(solve)
    solve.add_argument("--json", action="store_true", help="print one JSON object")
    solve.add_argument(
        "--quiet", "-q", action="store_true",
        help=f"no progress lines on stderr (printed every {PROGRESS_EVERY_S:.0f}s of a long search)",
    )
    solve.add_argument(
        "--tree", nargs="?", const=TREE_IN_JSON, default=None, metavar="FILE",
        help="write the search tree to FILE: node-link JSON (.json, or gzip-compressed .json.gz; "
        "`prmsearch view FILE` draws it) or GraphML (.graphml, needs networkx), by its suffix; a bare "
        "--tree with --json puts the tree into the printed JSON object instead",
    )
    solve.set_defaults(func=cmd_solve)


def _add_strategies(sub) -> None:
    strategies = sub.add_parser("strategies", help="list strategies and their options")
    strategies.add_argument("--json", action="store_true", help="print the strategies and options as JSON")
    strategies.set_defaults(func=cmd_strategies)
