"""The ``view`` command: one self-contained HTML page that draws a search tree.

Three sources: a tree file written by ``solve --tree FILE.json`` (or ``.json.gz``); one problem of
a bench run saved with ``--save-trees`` (``view RUN --problem ID``, narrowed by ``--strategy``,
``--budget`` and ``--seed`` when the run has several trees for it); or a question solved on the
spot (``view --question "..."`` with ``solve``'s search and backend flags).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prmsearch.cli.backends import add_backend_arguments, build_searcher, set_threads
from prmsearch.cli.errors import FlagError, flag_context, int_at_least, option_type

DEFAULT_PAGE = "tree.html"


def cmd_view(args: argparse.Namespace) -> int:
    from prmsearch.viewer import page_data, write_html

    graph = _question_tree(args) if args.question is not None else _source_tree(args)
    with flag_context("SOURCE", args.source, "give a tree file written by prmsearch (solve --tree, bench "
                      "--save-trees)"):
        page_data(graph)  # a file that is not a prmsearch tree is refused here, naming SOURCE
    out = Path(args.out) if args.out else _default_page(args)
    with flag_context("--out", str(out), "give a writable FILE.html"):
        write_html(graph, out)
    print(out)
    if args.open:
        import webbrowser

        webbrowser.open(out.resolve().as_uri())
    return 0


def _default_page(args: argparse.Namespace) -> Path:
    """``TREE.html`` beside a tree file, else ``tree.html`` here."""
    if args.source and Path(args.source).is_file():
        source = Path(args.source)
        name = source.name
        for suffix in (".json.gz", ".json", ".graphml"):
            if name.lower().endswith(suffix):
                name = name[: -len(suffix)]
                break
        return source.with_name(name + ".html")
    return Path(DEFAULT_PAGE)


def _question_tree(args: argparse.Namespace) -> dict[str, Any]:
    """Solve ``--question`` with the search flags and return its tree."""
    from prmsearch.cli.solve import check_question
    from prmsearch.tree_graph import result_graph

    if args.source is not None:
        fix = f"give a question or a SOURCE ({args.source!r}), not both"
        raise FlagError("--question", args.question, fix)
    for flag, value in (("--problem", args.problem), ("--budget", args.budget)):
        if value is not None:
            raise FlagError(flag, value, "picks a tree of a bench run; with --question, --n sets the budget")
    check_question(args.question)
    set_threads(args.threads)
    solve_args = argparse.Namespace(**{**vars(args), "strategy": args.strategy or "beam",
                                       "seed": 0 if args.seed is None else args.seed})
    result = build_searcher(solve_args)(args.question)
    return result_graph(result)


def _source_tree(args: argparse.Namespace) -> dict[str, Any]:
    """The tree of a tree file, or of one problem of a bench run folder."""
    from prmsearch.tree_graph import read_tree_graph

    if args.source is None:
        raise FlagError("SOURCE", None, "give a tree file (solve --tree FILE.json), a bench run folder with "
                        "--problem ID, or --question \"...\"")
    for flag, value in (("--n", args.n), ("-o/--option", args.option or None)):
        if value is not None:
            raise FlagError(flag, value, "sets the search of --question; a saved tree is drawn as it was")
    source = Path(args.source)
    if source.is_dir():
        return _run_tree(args, source)
    for flag, value in (("--problem", args.problem), ("--strategy", args.strategy), ("--budget", args.budget),
                        ("--seed", args.seed)):  # fmt: skip
        if value is not None:
            raise FlagError(flag, value, f"selects a tree of a bench run folder; {args.source} is a file")
    with flag_context("SOURCE", args.source, "give a tree file written by solve --tree (.json, .json.gz)"):
        if source.name.lower().endswith(".graphml"):
            return _graphml_tree(source)
        return read_tree_graph(source)


def _run_tree(args: argparse.Namespace, run: Path) -> dict[str, Any]:
    """The saved tree of ``--problem`` in the bench run folder ``run``."""
    from prmsearch.benchmarks.sweeps.trees import TreesFolder

    trees = TreesFolder.of_run(run)
    if not trees.path.is_dir():
        fix = "run `prmsearch bench --save-trees --out FOLDER` (a --resume adds the trees of what it runs)"
        raise FlagError("SOURCE", str(run), f"holds no trees/; {fix}")
    if args.problem is None:
        problems = sorted({key[0] for key in trees.saved()})
        raise FlagError("--problem", None, f"which problem of {run}? it has trees of: {_listing(problems)}")
    keys = trees.find(args.problem, args.strategy, args.budget, args.seed)
    if not keys:
        saved = trees.find(args.problem)
        if not saved:
            problems = sorted({key[0] for key in trees.saved()})
            raise FlagError("--problem", args.problem, f"no tree saved for it in {run}; problems with trees: "
                            f"{_listing(problems)}")
        raise FlagError("--strategy", args.strategy, f"no tree of problem {args.problem!r} matches "
                        f"--strategy/--budget/--seed; saved: {_listing(_cells(saved))}")
    if len(keys) > 1:
        raise FlagError("--strategy", args.strategy, f"problem {args.problem!r} has {len(keys)} trees: "
                        f"{_listing(_cells(keys))}; choose one with --strategy, --budget and --seed")
    with flag_context("SOURCE", str(run)):
        return trees.read(keys[0])


def _cells(keys) -> list[str]:
    return [f"--strategy {strategy} --budget {budget} --seed {seed}" for _, strategy, budget, seed in keys]


def _listing(items: list[str], limit: int = 12) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _graphml_tree(path: Path) -> dict[str, Any]:
    """Node-link data of a GraphML tree file (written by ``solve --tree FILE.graphml``)."""
    import json
    from xml.etree.ElementTree import ParseError

    from prmsearch.tree_graph import _networkx

    nx = _networkx()
    try:
        data = nx.node_link_data(nx.read_graphml(path, node_type=int), edges="edges")
    except (ParseError, nx.NetworkXError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a GraphML tree ({exc})") from None
    for node in data["nodes"]:
        ids = node.get("token_ids")
        node["token_ids"] = [int(t) for t in ids.split()] if isinstance(ids, str) else []
        if node.get("answer") == "":
            node["answer"] = None
    graph = data["graph"]
    for name in ("ledger", "answer_groups"):
        if isinstance(graph.get(name), str) and graph[name]:
            graph[name] = json.loads(graph[name])
    for name in ("answer", "error"):
        if graph.get(name) == "":
            graph[name] = None
    return data


def _add_view(sub) -> None:
    view = sub.add_parser(
        "view",
        help="draw a search tree as one self-contained HTML page",
        description="Write one HTML page (no network needed: CSS and JavaScript inline) that draws a "
        "search tree top-down: each node's step and score (coloured, with a legend), the chosen path "
        "highlighted, pruned branches dimmed; click a node to fold its subtree, hover for the full step, "
        "drag and wheel to pan and zoom.",
    )
    view.add_argument(
        "source", nargs="?", default=None, metavar="SOURCE",
        help="a tree file from `prmsearch solve --tree FILE` (.json, .json.gz, .graphml), or a bench run "
        "folder saved with --save-trees (then --problem)",
    )
    view.add_argument("--question", default=None, help="solve this question now and draw its tree")
    view.add_argument("--out", default=None, metavar="FILE",
                      help=f"the page to write (default: the tree file's name with .html, or {DEFAULT_PAGE})")
    view.add_argument("--open", action="store_true", help="open the page in the web browser afterwards")
    view.add_argument("--problem", default=None, metavar="ID", help="with a bench run folder: the problem id")
    view.add_argument(
        "--strategy", default=None,
        help="with a run folder: the strategy whose tree to draw; with --question: the search (beam)",
    )
    view.add_argument("--budget", type=int_at_least(1), default=None, metavar="N",
                      help="with a run folder: the budget whose tree to draw")
    view.add_argument("--seed", type=int, default=None,
                      help="with a run folder: the seed whose tree to draw; with --question: the run seed")
    view.add_argument("--n", type=int_at_least(1), default=None,
                      help="with --question: the budget in generations (default: the strategy's own)")
    view.add_argument(
        "--option", "-o", action="append", type=option_type("KEY=VALUE (e.g. width=4)"), default=[],
        metavar="KEY=VALUE", help="with --question: a strategy option, e.g. -o width=4 (repeatable)",
    )
    add_backend_arguments(view)
    view.set_defaults(func=cmd_view)

