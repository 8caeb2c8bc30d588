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


def add_strategy_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags choosing one strategy and its options (``solve``)."""
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
    parser.add_argument("--seed", type=int, default=0)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags choosing the backends, sampling and search limits (``solve`` and ``bench``)."""
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


def _unescape(text: str) -> str:
    """Let shell users write the delimiter as ``\\n\\n``."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


def build_searcher(args: argparse.Namespace) -> Searcher:
    """A Searcher from parsed search flags."""
    options = dict(args.option)
    options.setdefault("n", args.n)
    sampling = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_step_tokens,
        delimiter=_unescape(args.delimiter),
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


def _csv(kind):
    def parse(text: str):
        try:
            return tuple(kind(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None

    return parse


def cmd_bench(args: argparse.Namespace) -> int:
    from prmsearch.benchmarks.sweep_config import DEFAULT_STRATEGIES, SweepConfig

    if args.recipe:
        return _bench_recipe(args)
    options: dict[str, dict] = {}
    for key, value in args.option:
        strategy, dot, name = key.partition(".")
        if not dot:
            raise ValueError(f"bench options look like strategy.option=value, got {key!r}")
        options.setdefault(strategy, {})[name] = value
    config = SweepConfig(
        dataset=args.dataset,
        dataset_path=args.dataset_path,
        split=args.split,
        limit=args.limit,
        shuffle_seed=args.shuffle_seed,
        strategies=args.strategies or DEFAULT_STRATEGIES,
        budgets=args.budgets,
        seeds=args.seeds,
        policy=args.policy,
        policy_backend=args.policy_backend,
        prm=args.prm,
        prm_family=args.prm_family,
        temperature=args.temperature,
        top_p=args.top_p,
        max_step_tokens=args.max_step_tokens,
        delimiter=_unescape(args.delimiter),
        max_depth=args.max_depth,
        options=options,
        chunk=args.chunk,
        subsample_bon=args.subsample_bon is not False,
    )
    return _run_bench(args, config)


def _bench_recipe(args: argparse.Namespace) -> int:
    """``bench --recipe FILE``: the sweep and backends come from the YAML recipe."""
    import dataclasses

    from prmsearch.benchmarks.recipes import load_recipe

    recipe = load_recipe(args.recipe)
    config = recipe.sweep
    if args.limit is not None:
        config = dataclasses.replace(config, limit=args.limit)
    if args.subsample_bon is not None:
        config = dataclasses.replace(config, subsample_bon=args.subsample_bon)
    return _run_bench(args, config, backends=recipe.build_backends)


def _run_bench(args: argparse.Namespace, config, backends=None) -> int:
    """Load the dataset, run (or resume) the sweep, write and print the summary."""
    from pathlib import Path

    from prmsearch.benchmarks.datasets import load_dataset
    from prmsearch.benchmarks.report import summary_markdown, write_reports
    from prmsearch.benchmarks.sweep import SweepProblem, run_sweep, timestamped_folder

    dataset = load_dataset(
        config.dataset,
        config.dataset_path,
        split=config.split,
        limit=config.limit,
        shuffle_seed=config.shuffle_seed,
    )
    problems = [SweepProblem(str(p.id), p.question, str(p.answer)) for p in dataset]
    out = Path(args.out) if args.out else timestamped_folder("runs", config.dataset)
    policy = scorer = runner = None
    if getattr(args, "ray", False) or getattr(args, "ray_address", None):
        from prmsearch.benchmarks.distributed import RayConfig, RayRunner

        ray_config = RayConfig(address=args.ray_address, workers=args.ray_workers)
        runner = RayRunner(ray_config, backends=backends)  # each actor builds its own backends
    elif getattr(args, "ray_workers", None) is not None:
        raise ValueError("--ray-workers needs --ray or --ray-address")
    elif backends is not None:
        policy, scorer = backends()
    folder = run_sweep(
        config,
        problems,
        out,
        resume=args.resume,
        progress=not args.no_progress,
        policy=policy,
        scorer=scorer,
        runner=runner,
    )
    qids = {p.qid for p in problems}
    rows = [r for r in folder.rows() if r["qid"] in qids]
    summary = write_reports(folder.path, rows, config.dataset, len(problems))
    if args.json:
        print(json.dumps(summary))
    else:
        print(summary_markdown(summary))
        print(f"results: {folder.results_path}  summary: {folder.path / 'summary.json'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prmsearch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    solve = sub.add_parser("solve", help="solve one question with search")
    solve.add_argument("question")
    add_strategy_arguments(solve)
    add_backend_arguments(solve)
    solve.add_argument("--json", action="store_true", help="print one JSON object")
    solve.add_argument("--tree", action="store_true", help="with --json, include the search tree")
    solve.set_defaults(func=cmd_solve)

    strategies = sub.add_parser("strategies", help="list strategies and their options")
    strategies.add_argument("--json", action="store_true")
    strategies.set_defaults(func=cmd_strategies)

    bench = sub.add_parser("bench", help="sweep strategies x budgets x seeds over a dataset")
    bench.add_argument("--dataset", default="arith", help="arith, math500, gsm8k, aime24, amc23, jsonl")
    bench.add_argument("--dataset-path", default=None, help="local file of the dataset")
    bench.add_argument("--split", default=None)
    bench.add_argument("--limit", type=int, default=None)
    bench.add_argument("--shuffle-seed", type=int, default=None)
    bench.add_argument("--strategies", type=_csv(str), default=None, help="comma-separated")
    bench.add_argument("--budgets", type=_csv(int), default=(1, 4, 16))
    bench.add_argument("--seeds", type=_csv(int), default=(0,))
    bench.add_argument("--out", default=None, help="results folder (default: runs/<dataset>-<time>)")
    bench.add_argument("--resume", action="store_true", help="continue the run in --out")
    bench.add_argument("--recipe", default=None, help="a YAML recipe (recipes/*.yaml): backends and sweep")
    bench.add_argument("--chunk", type=int, default=64, help="problems per batched search")
    bench.add_argument("--json", action="store_true", help="print summary.json")
    bench.add_argument("--no-progress", action="store_true")
    bench.add_argument(
        "--subsample-bon",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run best_of_n/self_consistency/weighted_vote once, at the largest budget, and derive "
        "their other rows by re-selecting among its candidates (marked * in the summary; exact for "
        "backends whose i-th sample depends only on the seed, such as the embedded ones); "
        "--no-subsample-bon runs every cell (default: on; a recipe's own setting otherwise)",
    )
    bench.add_argument("--ray", action="store_true", help="shard problems over a local Ray cluster")
    bench.add_argument("--ray-address", default=None, metavar="ADDR", help="shard over this Ray cluster")
    bench.add_argument(
        "--ray-workers",
        type=int,
        default=None,
        metavar="K",
        help="Ray actors, each with its own backends (default: one per GPU, else 2)",
    )
    bench.add_argument(
        "--option",
        "-o",
        action="append",
        type=_parse_option,
        default=[],
        metavar="STRATEGY.KEY=VALUE",
        help="strategy option, e.g. -o beam.width=4 (repeatable)",
    )
    add_backend_arguments(bench)
    bench.set_defaults(func=cmd_bench)

    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


def _benchmark_commands(sub) -> None:
    from prmsearch.benchmarks.commands import register_commands
    from prmsearch.perf.command import register_perf_command

    register_commands(sub)
    register_perf_command(sub)


_EXTRA_COMMANDS: list = [_benchmark_commands]


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
