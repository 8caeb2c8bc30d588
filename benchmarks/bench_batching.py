"""Cross-problem batching, prefix reuse and incremental PRM scoring on the embedded models.

    python -m benchmarks.bench_batching [--problems 64] [--n 16] [--scorer arith|policy-confidence]

Beam search (N=16, width 4) over the first problems of the arithmetic test split, run once
batched by the driver and once one problem at a time with the same seeds (same answers), with
token counts against the naive loops. Prints one markdown table. The same figures appear in
``python -m benchmarks.perf`` (see ``benchmarks.batching``).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.batching import ArithEngineConfig, run_arith_engine


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--scorer", default="arith", help="arith (the shipped PRM) or policy-confidence")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = ArithEngineConfig(problems=args.problems, n=args.n, width=args.width, scorer=args.scorer)
    figures = run_arith_engine(cfg)
    print(
        f"beam N={args.n} width={args.width}, {args.problems} arithmetic test problems, "
        f"scorer {args.scorer}, {args.threads} threads\n"
    )
    print(figures.table())


if __name__ == "__main__":
    main()
