"""The ``solve`` command (one question with search) and the ``strategies`` command (list them)."""

from __future__ import annotations

import argparse
import json
import sys

from prmsearch.cli.backends import add_backend_arguments, add_strategy_arguments, build_searcher, set_threads
from prmsearch.cli.errors import FlagError
from prmsearch.search.protocol import STRATEGIES, strategy_spec


def check_question(question: str) -> None:
    """Refuse an empty or blank QUESTION before any model loads."""
    if not question.strip():
        raise FlagError("QUESTION", question, 'is empty or blank; give the question, e.g. "What is 2+3?"')


def cmd_solve(args: argparse.Namespace) -> int:
    check_question(args.question)
    set_threads(args.threads)
    searcher = build_searcher(args)
    result = searcher(args.question)
    if args.json:
        print(json.dumps(result.to_dict(include_tree=args.tree)))
    else:
        for i, (step, score) in enumerate(zip(result.steps, result.step_scores, strict=True), 1):
            print(f"[{i}] ({score:.3f}) {step}")
        print(f"answer: {result.answer}")
        ledger = result.ledger
        print(
            f"cost: {ledger.generations} generations, {ledger.generated_tokens} tokens generated, "
            f"{ledger.prm_tokens_computed} PRM tokens, {ledger.flops:.3g} FLOPs, {ledger.wall_s:.2f}s"
        )
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        if result.error:
            print(f"error: {result.error}", file=sys.stderr)
    return 1 if result.error else 0


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
    solve.add_argument("question", help="the question, in quotes")
    add_strategy_arguments(solve)
    add_backend_arguments(solve)
    solve.add_argument("--json", action="store_true", help="print one JSON object")
    solve.add_argument("--tree", action="store_true", help="with --json, include the search tree")
    solve.set_defaults(func=cmd_solve)


def _add_strategies(sub) -> None:
    strategies = sub.add_parser("strategies", help="list strategies and their options")
    strategies.add_argument("--json", action="store_true", help="print the strategies and options as JSON")
    strategies.set_defaults(func=cmd_strategies)
