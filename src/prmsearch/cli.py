"""Command line: ``prmsearch solve | strategies`` (more subcommands register themselves here)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from prmsearch.api import Searcher, resolve_policy, resolve_scorer
from prmsearch.policies.base import SamplingParams
from prmsearch.search.protocol import STRATEGIES, strategy_spec


def _parse_option(text: str) -> tuple[str, object]:
    """``key=value`` with the value read as JSON when it parses (numbers, booleans), else text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"strategy options look like key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that runs a search."""
    parser.add_argument("--strategy", default="beam", help="strategy name (see `prmsearch strategies`)")
    parser.add_argument("--n", type=int, default=16, help="compute budget in generations")
    parser.add_argument(
        "--option",
        "-o",
        action="append",
        type=_parse_option,
        default=[],
        metavar="KEY=VALUE",
        help="strategy option, e.g. -o width=4 -o aggregation=min (repeatable)",
    )
    parser.add_argument(
        "--policy", default=None, help="policy backend name or model path/Hub id (default: embedded)"
    )
    parser.add_argument("--policy-backend", default=None, help="backend for a model path (default: hf)")
    parser.add_argument(
        "--prm", default=None, help="scorer name or PRM model path/Hub id (default: embedded)"
    )
    parser.add_argument("--prm-family", default=None, help="PRM family of a model path, e.g. qwen-prm")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-step-tokens", type=int, default=256)
    parser.add_argument("--delimiter", default="\n\n", help="step delimiter (default: blank line)")
    parser.add_argument("--max-depth", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)


def build_searcher(args: argparse.Namespace) -> Searcher:
    """A Searcher from parsed search flags."""
    options = dict(args.option)
    options.setdefault("n", args.n)
    sampling = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_step_tokens,
        delimiter=args.delimiter,
    )
    if args.policy_backend and args.policy:
        policy = resolve_policy(args.policy_backend, model=args.policy)
    else:
        policy = resolve_policy(args.policy)
    scorer = resolve_scorer(args.prm, args.prm_family)
    return Searcher(
        policy,
        scorer,
        args.strategy,
        sampling=sampling,
        max_depth=args.max_depth,
        seed=args.seed,
        **options,
    )


def cmd_solve(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prmsearch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    solve = sub.add_parser("solve", help="solve one question with search")
    solve.add_argument("question")
    add_search_arguments(solve)
    solve.add_argument("--json", action="store_true", help="print one JSON object")
    solve.add_argument("--tree", action="store_true", help="with --json, include the search tree")
    solve.set_defaults(func=cmd_solve)

    strategies = sub.add_parser("strategies", help="list strategies and their options")
    strategies.add_argument("--json", action="store_true")
    strategies.set_defaults(func=cmd_strategies)

    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


_EXTRA_COMMANDS: list = []


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"prmsearch: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
