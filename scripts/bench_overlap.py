"""Lock step against overlapped rounds on the embedded models (or any policy and PRM).

    python scripts/bench_overlap.py [--problems 64] [--overlap 2] [--policy ID --prm ID]

Beam search, particle filtering and best-of-N at N=16 over the first arithmetic test problems,
each run alternately with ``overlap=1`` and ``overlap=K`` (see ``prmsearch.perf.overlap``);
prints one markdown table.
"""

from __future__ import annotations

import argparse

from prmsearch.api import resolve_policy, resolve_scorer
from prmsearch.arith.problems import load_split
from prmsearch.perf.overlap import HEADER, measure_overlap


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--policy", default=None, help="policy id or folder (default: embedded)")
    parser.add_argument("--prm", default=None, help="PRM id or folder (default: embedded)")
    args = parser.parse_args()
    policy, scorer = resolve_policy(args.policy), resolve_scorer(args.prm)
    questions = [p.question for p in load_split("test", args.problems)]

    def clear_caches() -> None:
        for backend in (policy, scorer):
            clear = getattr(backend, "clear_caches", None)
            if callable(clear):
                clear()

    print(HEADER)
    for strategy, options in (("beam", {"n": 16, "width": 4}), ("particle_filter", {"n": 16}),
                              ("best_of_n", {"n": 16})):
        figures = measure_overlap(policy, scorer, questions, strategy, args.overlap, args.repeats,
                                  clear_caches, **options)
        print(figures.row(), flush=True)


if __name__ == "__main__":
    main()
