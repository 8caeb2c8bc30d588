"""Cross-problem batching, prefix reuse and incremental PRM scoring on the embedded models.

    python scripts/bench_batching.py [--problems 64] [--n 16] [--scorer arith|policy-confidence]

Beam search (N=16, width 4) over the first problems of the arithmetic test split, run once
batched by the driver and once one problem at a time with the same seeds (same answers), with
token counts against the naive loops. Prints one markdown table.
"""

from __future__ import annotations

import argparse

import torch

from prmsearch import make_policy, make_scorer
from prmsearch.arith.models import default_policy_path
from prmsearch.arith.problems import load_split
from prmsearch.benchmarks.batching import measure_engine


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
    policy = make_policy("arith")
    if args.scorer == "policy-confidence":
        scorer = make_scorer("policy-confidence", model=str(default_policy_path()), device="cpu")
    else:
        scorer = make_scorer(args.scorer)

    def clear_caches() -> None:
        for backend in (policy, scorer):
            clear = getattr(backend, "clear_caches", None)
            if clear is not None:
                clear()

    problems = load_split("test", args.problems)
    figures = measure_engine(
        policy,
        scorer,
        [p.question for p in problems],
        [str(p.answer) for p in problems],
        n=args.n,
        width=args.width,
        clear_caches=clear_caches,
    )
    print(
        f"beam N={args.n} width={args.width}, {args.problems} arithmetic test problems, "
        f"scorer {args.scorer}, {args.threads} threads\n"
    )
    print(figures.table())


if __name__ == "__main__":
    main()
