"""Print the driver's orchestration overhead per expanded node with instant backends.

    python -m benchmarks.bench_overhead [--problems 1000]
"""

from __future__ import annotations

import argparse

from benchmarks.overhead import HEADER, run_overhead_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", type=int, default=1000)
    args = parser.parse_args()
    print(HEADER)
    for figures in run_overhead_suite(args.problems):
        print(figures.row(), flush=True)


if __name__ == "__main__":
    main()
