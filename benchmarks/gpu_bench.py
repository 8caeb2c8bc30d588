"""PRM scoring and policy decode throughput at Qwen2.5-Math sizes, against H200 rooflines.

    python -m benchmarks.gpu_bench --out gpu_bench.json          # on the GPU machine, < 8 minutes
    python -m benchmarks.gpu_bench --small --out /tmp/small.json # tiny models on CPU (CI), < 60 s

Builds Qwen2.5-Math-PRM-7B- and Qwen2.5-Math-1.5B-shaped models with random weights directly on
the device, measures the transformers backends (HFPRMScorer at several max_batch_tokens budgets,
HFPolicy decode at several batch sizes), prints progress, one table and the roofline
assumptions, and writes the figures as JSON (see ``benchmarks.gpu``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", action="store_true", help="tiny models, runs on a CPU (CI)")
    parser.add_argument("--out", default=None, help="write the figures to this JSON file")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--dtype", default=None, help="default: bf16 on cuda, float32 on cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (H200: 989)")
    parser.add_argument("--bandwidth-tbs", type=float, default=None, help="memory bandwidth (H200: 4.8)")
    args = parser.parse_args()
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {message}", file=sys.stderr, flush=True)

    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from benchmarks.gpu import GpuBenchConfig, run_gpu_bench

    cfg = GpuBenchConfig.small() if args.small else GpuBenchConfig()
    hw = cfg.hardware
    if args.peak_tflops is not None or args.bandwidth_tbs is not None:
        hw = replace(hw, name=f"{hw.name} (overridden)",
                     peak_tflops=args.peak_tflops or hw.peak_tflops,
                     bandwidth_tbs=args.bandwidth_tbs or hw.bandwidth_tbs)
    cfg = replace(cfg, hardware=hw, device=args.device, dtype=args.dtype)
    log(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
    report = run_gpu_bench(cfg, log)
    print(report.table(), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report.to_dict(), f, indent=2)
        log(f"wrote {args.out}")
    log("done")


if __name__ == "__main__":
    main()
