"""Print PRM tokens/s of packed against padded forwards, and the time of a call whose shared
question runs once against by every input, on saved real solutions.

    python -m benchmarks.bench_prm_layout --samples RUNS/bon16.jsonl \
        --prm ~/.cache/prmsearch/prms/qwen2.5-coder-0.5b-gsm8k-mc-head-432 --family qwen-prm \
        [--problems 8] [--threads 2] [--workloads whole,steps,shared]

``--samples`` is a file of ``prmsearch aggregate`` rows (a best-of-16 run's samples restored with
``scripts/export_samples.py restore``). See :mod:`benchmarks.prm_layout`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.prm_layout import LayoutBenchConfig, figure_lines, run_layout_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=Path, required=True)
    parser.add_argument("--prm", required=True, help="PRM or verifier folder")
    parser.add_argument("--family", required=True, help="PRM family (qwen-prm, verifier, ...)")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--per-problem", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--workloads", default="whole,steps,shared",
                        help="comma-separated: whole, steps, shared (default all three)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = LayoutBenchConfig(args.samples, args.prm, args.family, problems=args.problems,
                            per_problem=args.per_problem,
                            prm_args={"device": "cpu", "dtype": args.dtype},
                            workloads=tuple(w.strip() for w in args.workloads.split(",") if w.strip()))
    figures = run_layout_bench(cfg)
    for line in figure_lines(figures):
        print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps([f.__dict__ for f in figures], indent=2))


if __name__ == "__main__":
    main()
