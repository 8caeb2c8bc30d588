"""Command lines of the embedded arithmetic models' training (:mod:`training.arith`):
how the shipped policy and PRM were made, and how their labels and accuracy are checked.

    python -m training.train_arith policy --smoke --out /tmp/arith      # train_policy_main
    python -m training.train_arith_prm --smoke --out /tmp/prm            # train_prm_main
    python -m training.arith eval-policy FOLDER --split validation --k 16
    python -m training.arith label-quality labels.jsonl --thresholds 0,0.25,0.5

The training modules hold the work; the parsers live here, with the rest of the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from prmsearch.arith.models import default_policy_path
from prmsearch.arith.tokenizer import DEFAULT_VOCAB_SIZE, save_tokenizer, train_tokenizer
from training.arith import label_quality, pipeline, policy_train
from training.arith.pipeline import OPT_IN_VARIANTS, PipelineConfig, run
from training.arith.policy_eval import PHRASINGS, EvalConfig, evaluate_policy
from training.arith.policy_train import TrainConfig, build_config, train_command, train_policy
from training.arith.prm_train import DENSE_MODES


def train_policy_main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``policy`` trains and saves the policy; ``tokenizer`` saves only the tokenizer."""
    parser = argparse.ArgumentParser(prog="python -m training.train_arith",
                                     description=policy_train.__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    pol = sub.add_parser("policy", help="train the arithmetic policy")
    pol.add_argument("--out", required=True, help="output folder")
    pol.add_argument("--steps", type=int, default=None, help=f"default {TrainConfig.steps}")
    pol.add_argument(
        "--lr-horizon", type=int, default=None, help="steps of the cosine schedule (default: --steps)"
    )
    pol.add_argument("--batch-size", type=int, default=None)
    pol.add_argument("--lr", type=float, default=None)
    pol.add_argument("--seed", type=int, default=None)
    pol.add_argument(
        "--phrased",
        type=float,
        default=None,
        help="share of training questions in other phrasings (0 = canonical only; the shipped policy: 0.5)",
    )
    pol.add_argument("--vocab-size", type=int, default=None, help=f"default {DEFAULT_VOCAB_SIZE}")
    pol.add_argument(
        "--save-at",
        type=str,
        default="",
        help="comma-separated steps at which to save <out>/ckpt-<step> as well",
    )
    pol.add_argument("--smoke", action="store_true", help="a tiny run of a few seconds (CI)")
    tk = sub.add_parser("tokenizer", help="save only the tokenizer")
    tk.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.what == "tokenizer":
        save_tokenizer(train_tokenizer(), args.out)
        return 0
    save_at = tuple(int(s) for s in args.save_at.split(",") if s.strip())
    cfg = build_config(
        args.smoke,
        save_at=save_at,
        steps=args.steps,
        lr_horizon=args.lr_horizon,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        phrased=args.phrased,
        vocab_size=args.vocab_size,
    )
    train_policy(cfg, args.out, command=train_command(cfg, args.out))
    return 0


def train_prm_main(argv: Sequence[str] | None = None) -> int:
    """Label, train, evaluate and (with ``--ship``) ship the embedded PRM
    (``python -m training.train_arith_prm``)."""
    parser = argparse.ArgumentParser(
        prog="python -m training.train_arith_prm", description=pipeline.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policy", default=None, help="policy folder (default: the shipped one)")
    parser.add_argument(
        "--base",
        default=None,
        help="causal LM the PRM bodies start from (default: OUT/base, trained first if missing)",
    )
    parser.add_argument("--variants", default=None, help="comma-separated PRM variants (default: all but "
                        f"{', '.join(OPT_IN_VARIANTS)})")
    parser.add_argument(
        "--dense-weight", type=float, default=None, help="weight of the shipped variant's per-token loss"
    )
    parser.add_argument("--dense-mode", choices=DENSE_MODES, default=None,
                        help="per-token targets of the checker+synthetic variant")
    parser.add_argument(
        "--synthetic-error-rate",
        type=float,
        default=None,
        help="give every synthetic step a wrong result with this probability (default: one error)",
    )
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate of the shipped variant")
    parser.add_argument("--out", default="runs/prm")
    parser.add_argument("--ship", action="store_true", help="copy the best PRM into the package")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run (CI)")
    parser.add_argument("--train-problems", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="training steps per label source")
    parser.add_argument("--shipped-steps", type=int, default=None, help="steps of the checker+synthetic PRMs")
    parser.add_argument("--extra-layers", type=int, default=None, help="layers stacked on the policy body")
    parser.add_argument(
        "--test-problems", type=int, default=None, help="test problems for the search figures"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads for training (1 when the cores are shared)"
    )
    args = parser.parse_args(argv)
    cfg = PipelineConfig.smoke() if args.smoke else PipelineConfig()
    if args.train_problems:
        cfg = dataclasses.replace(cfg, train_problems=args.train_problems)
    if args.steps:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=args.steps))
    if args.extra_layers is not None:
        cfg = dataclasses.replace(
            cfg,
            train=dataclasses.replace(cfg.train, extra_layers=args.extra_layers),
            shipped_train=dataclasses.replace(cfg.shipped_train, extra_layers=args.extra_layers),
            steps_train=dataclasses.replace(cfg.steps_train, extra_layers=args.extra_layers),
        )
    if args.test_problems:
        cfg = dataclasses.replace(cfg, test_problems=args.test_problems)
    if args.variants:
        cfg = dataclasses.replace(cfg, variants=tuple(v.strip() for v in args.variants.split(",")))
    if args.synthetic_error_rate is not None:
        cfg = dataclasses.replace(cfg, synthetic_error_rate=args.synthetic_error_rate)
    for flag, name in ((args.dense_mode, "dense_mode"), (args.lr, "lr")):
        if flag is not None:
            cfg = dataclasses.replace(
                cfg, shipped_train=dataclasses.replace(cfg.shipped_train, **{name: flag})
            )
    if args.dense_weight is not None:
        cfg = dataclasses.replace(
            cfg, shipped_train=dataclasses.replace(cfg.shipped_train, dense_weight=args.dense_weight)
        )
    if args.shipped_steps:
        cfg = dataclasses.replace(
            cfg,
            shipped_train=dataclasses.replace(cfg.shipped_train, steps=args.shipped_steps),
            steps_train=dataclasses.replace(cfg.steps_train, steps=args.shipped_steps),
        )
    threads = {"threads": args.threads} if args.threads else {}
    cfg = dataclasses.replace(
        cfg,
        seed=args.seed,
        train=dataclasses.replace(cfg.train, seed=args.seed, **threads),
        shipped_train=dataclasses.replace(cfg.shipped_train, seed=args.seed, **threads),
        steps_train=dataclasses.replace(cfg.steps_train, seed=args.seed, **threads),
    )
    policy_dir = Path(args.policy) if args.policy else default_policy_path()
    report = run(policy_dir, Path(args.out), cfg, base_dir=Path(args.base) if args.base else None)
    if args.ship:
        best = report["chosen"]  # chosen on validation (best_source)
        target = default_policy_path().parent / "prm"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(args.out) / f"prm-{best}", target)
        print(f"shipped the {best} PRM to {target}")
    return 0


def eval_policy_main(argv: Sequence[str] | None = None) -> int:
    """Print one JSON line of `EvalReport` per folder."""
    parser = argparse.ArgumentParser(prog="python -m training.arith eval-policy")
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--split", default=EvalConfig.split)
    parser.add_argument("--n", type=int, default=None, help="first N problems of the split")
    parser.add_argument("--k", type=int, default=EvalConfig.k)
    parser.add_argument("--temperature", type=float, default=EvalConfig.temperature)
    parser.add_argument("--top-p", type=float, default=EvalConfig.top_p)
    parser.add_argument("--seed", type=int, default=EvalConfig.seed)
    parser.add_argument("--phrasing", choices=PHRASINGS, default=EvalConfig.phrasing)
    args = parser.parse_args(argv)
    cfg = EvalConfig(
        split=args.split,
        n_problems=args.n,
        k=args.k,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        phrasing=args.phrasing,
    )
    for folder in args.folders:
        report = evaluate_policy(folder, cfg)
        print(json.dumps({"folder": str(folder), **asdict(cfg), **asdict(report)}), flush=True)
    return 0



def label_quality_main(argv: Sequence[str] | None = None) -> int:
    """Score a ``labels.jsonl`` of the arith dataset against the exact checker, as a table."""
    parser = argparse.ArgumentParser(
        prog="python -m training.arith label-quality", description=label_quality.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("labels", help="labels.jsonl of `prmsearch label` on the arith dataset")
    parser.add_argument("--thresholds", default="0,0.25,0.5", help="MC thresholds to compare")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in Path(args.labels).read_text().splitlines() if line.strip()]
    table = label_quality.label_quality(rows, [float(t) for t in args.thresholds.split(",")])
    print(json.dumps(table) if args.json else label_quality.markdown(table), end="\n" if args.json else "")
    return 0


COMMANDS = {
    "train-policy": train_policy_main,
    "train-prm": train_prm_main,
    "eval-policy": eval_policy_main,
    "label-quality": label_quality_main,
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m training.arith COMMAND ...``: one of :data:`COMMANDS`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print(f"usage: python -m training.arith {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
