"""Every speed measurement in one table (see :mod:`benchmarks.suite`), from the repository root:

    python -m benchmarks.perf --quick                 # tiny sizes, well under a minute
    python -m benchmarks.perf --json perf.json        # the full suite (about half an hour on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prmsearch.cli.errors import CliParser
from prmsearch.cli.evaluate import csv_of, fail, input_errors


def cmd_perf(args: argparse.Namespace) -> int:
    """Run the performance measures and print one table."""
    import dataclasses
    import time

    from benchmarks.suite import PerfConfig, run_perf

    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads must be >= 1, got {args.threads}")
            import torch

            torch.set_num_threads(args.threads)
        config = PerfConfig.quick() if args.quick else PerfConfig()
        changes: dict[str, Any] = {"results": args.results, "gpu_json": args.gpu_json,
                                   "skip": frozenset(args.skip)}
        if args.overhead_problems is not None:
            changes["overhead_problems"] = args.overhead_problems
        if args.problems is not None:
            changes["arith"] = dataclasses.replace(config.arith, problems=args.problems)
        ratio: dict[str, Any] = {}
        if args.real_recipe is not None:
            ratio["recipe"] = str(args.real_recipe)
        for flag in ("ratio_problems", "ratio_budget", "ratio_engines", "ratio_strategies"):
            value = getattr(args, flag)
            if value is not None:
                ratio[flag.removeprefix("ratio_")] = value
        if ratio:
            changes["engine_ratio"] = dataclasses.replace(config.engine_ratio, **ratio)
        config = dataclasses.replace(config, **changes)
        report = run_perf(config, log)
    except input_errors() as exc:
        return fail("perf", exc)
    print(report.table(), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The suite's flags."""
    from benchmarks.suite import MEASURES, SOURCES

    parser = CliParser(
        prog="python -m benchmarks.perf",
        description=(
            "Runs the driver-overhead suite, the embedded-model engine run (batched vs one at a "
            "time, prefix reuse, incremental PRM scoring), the random-weight depth-10 search, reads "
            "accuracy at equal compute from a bench results folder and GPU figures from "
            "scripts/gpu_bench.py's JSON, and prints one row per figure with its threshold."
        ),
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (tests; well under a minute)")
    parser.add_argument("--problems", type=int, default=None,
                        help="arithmetic problems of the engine run (default 64; --quick 4)")
    parser.add_argument("--overhead-problems", type=int, default=None,
                        help="problems per overhead configuration (default 1000; --quick 20)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--results", type=Path, default=None, metavar="FOLDER",
                        help="a `prmsearch bench` results folder (or summary.json) for equal compute")
    parser.add_argument("--gpu-json", type=Path, default=None, metavar="FILE",
                        help="the JSON written by scripts/gpu_bench.py --out")
    parser.add_argument("--skip", type=csv_of(str), default=(),
                        help=f"comma-separated measures to leave out: {', '.join((*MEASURES, *SOURCES))}")
    parser.add_argument("--real-recipe", type=Path, default=None, metavar="RECIPE",
                        help="run the engine-ratio rows on a real model's bench recipe (its vLLM "
                        "policy folder, PRM, sampling and dataset sample) instead of the embedded "
                        "models, e.g. recipes/gsm8k_qwen25-coder-0.5b_policy-confidence_cpu.yaml")
    parser.add_argument("--ratio-problems", type=int, default=None,
                        help="problems of the engine-ratio rows (default 32)")
    parser.add_argument("--ratio-budget", type=int, default=None,
                        help="N of every engine-ratio strategy (default 16)")
    parser.add_argument("--ratio-engines", type=csv_of(str), default=None,
                        help="engine-ratio engines: vllm (offline), openai (vLLM server)")
    parser.add_argument("--ratio-strategies", type=csv_of(str), default=None,
                        help="engine-ratio strategies: beam, particle_filter, best_of_n")
    parser.add_argument("--json", default=None, metavar="FILE", help="write every figure to this JSON file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and run the suite; the exit status."""
    return cmd_perf(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
