"""The command line of the PRM kit at real model size (:mod:`training.prm_kit`), run as
``python -m training.gpu_prm_kit``: flags, the time estimate and refusal, then the three phases."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from training import prm_kit
from training.prm_kit import (
    BASE_SHAPES,
    Kit,
    KitConfig,
    environment,
    estimate,
    policy_prompt_tokens,
    run_phase,
    table,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m training.gpu_prm_kit", description=prm_kit.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="tiny models and sizes on the CPU (CI)")
    parser.add_argument("--out", default=None, help="write the figures to this JSON file")
    parser.add_argument("--device", default=None, help="default: cuda (cpu with --small)")
    parser.add_argument("--dtype", default=None, help="default: bf16 on cuda, float32 on cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--work", default=None, help="folder for labels and checkpoints (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="refuse to start when the estimate exceeds this (default 10)")
    parser.add_argument("--problems", type=int, default=None, help="problems to label (default 64)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="hold every N-th problem out of training for the evaluation (default 4)")
    parser.add_argument("--samples", type=int, default=None, help="solutions per problem (default 4)")
    parser.add_argument("--rollouts", type=int, default=None, help="MC rollouts per step prefix (default 4)")
    parser.add_argument("--solution-tokens", type=int, default=None,
                        help="tokens per solution or rollout (default 192)")
    parser.add_argument("--step-tokens", type=float, default=None, help="mean tokens per step (default 48)")
    parser.add_argument("--label-chunk", type=int, default=None, help="problems per labelling call (32)")
    parser.add_argument("--label-seconds", type=float, default=None,
                        help="labelling starts no new chunk after this (default 240)")
    parser.add_argument("--train-steps", type=int, default=None, help="optimiser steps (default 40)")
    parser.add_argument("--train-batch", type=int, default=None, help="rows per forward pass (default 8)")
    parser.add_argument("--grad-accum", type=int, default=None, help="passes per optimiser step (default 4)")
    parser.add_argument("--base-shape", choices=sorted(BASE_SHAPES), default=None,
                        help="shape of the base the PRM is trained from (default 1.5b; tiny with --small)")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> KitConfig:
    """The defaults (or --small's), with every size flag given applied."""
    cfg = KitConfig.small() if args.small else KitConfig()
    names = ("problems", "eval_every", "samples", "rollouts", "solution_tokens", "step_tokens",
             "label_chunk", "label_seconds", "train_steps", "train_batch", "grad_accum", "budget_minutes")
    flags = {name: getattr(args, name) for name in names}
    changes: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    if args.base_shape is not None:
        changes["base"] = BASE_SHAPES[args.base_shape]
    return replace(cfg, **changes)


def fail(text: str) -> NoReturn:
    """Stop with one line on stderr."""
    print(f"gpu_prm_kit: {text}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> None:
    """Estimate, refuse when over budget, then label, train and evaluate (each phase recorded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built here; never wait on a network
    args = parse_args(argv)
    start = time.perf_counter()

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f}s] {text}", file=sys.stderr, flush=True)

    try:
        cfg = config_from_args(args)
    except ValueError as err:
        fail(f"{err}")
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # checkpoint bars would bury the progress lines
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device_name = args.device or ("cpu" if args.small else "cuda")
    if device_name.startswith("cuda") and not torch.cuda.is_available():
        fail(f"--device {device_name} needs a CUDA GPU and torch {torch.__version__} sees none; run on the "
             "GPU machine, or use --small (tiny models on the CPU)")
    from prmsearch.arith.problems import load_split
    from prmsearch.engines.loading import resolve_dtype

    device = torch.device(device_name)
    try:
        dtype = resolve_dtype(args.dtype, device)
    except ValueError as err:
        fail(f"--dtype: {err}")
    log(f"torch {torch.__version__}, device {device}, dtype {str(dtype).replace('torch.', '')}")

    prompt = max(policy_prompt_tokens(p.question) for p in load_split("train", min(cfg.problems, 64)))
    parts = estimate(cfg, prompt)
    total = sum(parts.values())
    log("estimate on an H200 (conservative rates, see training.prm_kit.Rates): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in parts.items()) + f"; total {total / 60:.1f} min")
    if args.small:
        log("--small: the estimate is for the real sizes' rates; tiny models take seconds")
    elif total > 60 * cfg.budget_minutes:
        fail(f"the estimate ({total / 60:.1f} min) exceeds --budget-minutes {cfg.budget_minutes:g}; lower "
             "--problems, --rollouts, --solution-tokens or --train-steps, or raise --budget-minutes")

    report: dict[str, Any] = {
        "environment": environment(device, dtype),
        "config": cfg.to_dict(),
        "estimate_s": {**parts, "total": total},
        "phases": {},
    }

    def write() -> None:
        report["total_s"] = time.perf_counter() - start
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    write()  # the estimate, and an early failure when --out cannot be written
    with tempfile.TemporaryDirectory(prefix="gpu_prm_kit-") as temporary:
        work = Path(args.work) if args.work else Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        if any(work.iterdir()):
            fail(f"--work {work} is not empty; give a new or empty folder")
        kit = Kit(cfg, device, dtype, args.dtype, work, log, args.threads)
        # labelling stops early enough to leave the estimated time of what follows it
        rest = sum(v for k, v in parts.items() if k not in ("startup", "policy build", "labelling"))
        deadline = min(time.perf_counter() + cfg.label_seconds, start + 60 * cfg.budget_minutes - rest - 30)
        for name, fn in (("labelling", lambda: kit.label(deadline)), ("training", kit.train),
                         ("eval", kit.evaluate)):  # fmt: skip
            report["phases"][name] = run_phase(name, fn, kit)
            write()
    print(table(report["phases"]), flush=True)
    env = ", ".join(f"{k}={v}" for k, v in report["environment"].items())
    print(f"\nEnvironment: {env}\nModels with random weights: the figures are throughput, not PRM "
          "quality.", flush=True)
    write()
    if args.out:
        log(f"wrote {args.out}")
    log(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
