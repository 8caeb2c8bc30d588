"""Measure the transformers backends side by side in one run and print one table.

    python -m benchmarks.bench_backends [--quick] [--threads 1] [--json out.json]

PRM throughput batched vs one by one, PRM tokens computed with incremental scoring vs full
re-scoring along a beam search, and policy prompt tokens with vs without prefix reuse (plus the
naive n x prompt count), on random-weight Qwen2 models built in place (see
``benchmarks.backend_bench`` for what exactly is measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small models and search (tests)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from benchmarks.backend_bench import BackendBenchConfig, run_backend_bench

    cfg = BackendBenchConfig.quick() if args.quick else BackendBenchConfig.full()
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    figures = run_backend_bench(cfg, log)
    print(figures.table(), flush=True)
    log("done")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures.to_dict(), f, indent=2)


if __name__ == "__main__":
    main()
