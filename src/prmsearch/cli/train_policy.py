"""The ``train-policy`` command: SFT or DPO of a policy on exported search data
(:mod:`prmsearch.distill`); the output folder is usable as ``--policy DIR``."""

from __future__ import annotations

import argparse
import json

from prmsearch.cli.errors import FlagError

__all__ = ["cmd_train_policy", "register_train_policy_command"]


def cmd_train_policy(args: argparse.Namespace) -> int:
    from prmsearch.distill import PolicyTrainConfig, train_policy

    base = args.base
    if base is None:
        from prmsearch.arith.models import default_policy_path

        base = str(default_policy_path())
    try:
        config = PolicyTrainConfig(
            method=args.method, epochs=args.epochs, steps=args.steps, learning_rate=args.lr,
            batch_size=args.batch_size, beta=args.beta, lora_rank=args.lora_rank,
            max_length=args.max_length, seed=args.seed, threads=args.threads,
        )  # fmt: skip
    except ValueError as exc:
        flag = "--" + str(exc).split(" ")[0].replace("_", "-").replace("learning-rate", "lr")
        raise FlagError(flag, None, str(exc)) from None
    record = train_policy(args.data, base, args.out, config)
    print(json.dumps({k: record[k] for k in ("rows", "steps", "seconds", "first_loss", "last_loss")}))
    print(f"policy: {args.out} (use it as --policy {args.out})")
    return 0


def register_train_policy_command(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train-policy",
        help="SFT or DPO of a policy (TRL) on rows from `prmsearch export`",
        description="Fine-tune a causal LM on exported search data with TRL's SFTTrainer or DPOTrainer. "
        "The output folder keeps the base's prompt format, so --policy OUT searches with it.",
    )
    parser.add_argument("data", help="an export folder (or its data.jsonl / data.parquet)")
    parser.add_argument("--out", required=True, help="folder for the trained policy")
    parser.add_argument("--method", default="sft", choices=("sft", "dpo"), help="sft (default) or dpo")
    parser.add_argument(
        "--base", default=None, help="the policy to start from (default: the embedded policy)"
    )
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over the data (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps (overrides --epochs)")
    parser.add_argument(
        "--lr", type=float, default=None, help="peak learning rate (default: 1e-4 sft, 1e-6 dpo)"
    )
    parser.add_argument("--batch-size", type=int, default=16, help="rows per step (default 16)")
    parser.add_argument("--beta", type=float, default=0.1, help="DPO's beta (default 0.1)")
    parser.add_argument(
        "--lora-rank", type=int, default=0, help="train a LoRA adapter of this rank (0: all weights)"
    )
    parser.add_argument("--max-length", type=int, default=1024, help="truncate rows to this many tokens")
    parser.add_argument("--seed", type=int, default=0, help="the trainer's seed")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.set_defaults(func=cmd_train_policy)
