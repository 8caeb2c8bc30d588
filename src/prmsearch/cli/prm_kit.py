"""The PRM kit's commands: ``label`` (sample solutions and label their steps) and ``train-prm``."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from prmsearch.cli.backends import load_policy, set_threads
from prmsearch.cli.bench import (
    add_ray_arguments,
    check_ray_flags,
    dataset_from_flags,
    in_workers,
    load_problems,
    ray_runner,
)
from prmsearch.cli.errors import (
    FlagError,
    _unescape,
    cli_text,
    config_from_flags,
    flag_context,
    int_at_least,
    option_type,
)


def cmd_label(args: argparse.Namespace) -> int:
    """``prmsearch label``: sample solutions and label their steps (MC, judge or consensus)."""
    import time
    from types import SimpleNamespace

    from prmsearch import __version__
    from prmsearch.benchmarks.sweeps.results import ResultsFolderError
    from prmsearch.prm.labelling import LabelConfig, LabelProblem, run_labelling

    if args.resume and not args.out:
        raise FlagError("--resume", None, "needs --out FOLDER, the folder of the run to continue")
    if args.judge_backend is not None and not args.judge:
        raise FlagError("--judge-backend", args.judge_backend, "needs --judge MODEL")
    if args.retry_errors and not args.resume:
        raise FlagError("--retry-errors", None, "needs --resume --out FOLDER (it labels that run's errored "
                        "problems again)")
    if args.set_aside_damaged and not args.resume:
        raise FlagError("--set-aside-damaged", None, "needs --resume --out FOLDER (it repairs that run's "
                        "labels file)")
    check_ray_flags(args)
    values = {
        "method": args.method, "samples": args.samples, "rollouts": args.rollouts,
        "mc_threshold": args.mc_threshold, "judge_samples": args.judge_samples,
        "temperature": args.temperature, "judge_temperature": args.judge_temperature,
        "solution_max_tokens": args.max_solution_tokens, "judge_max_tokens": args.judge_max_tokens,
        "delimiter": _unescape(args.delimiter), "seed": args.seed, "chunk": args.chunk,
    }  # fmt: skip
    cfg = config_from_flags(LabelConfig, values, _LABEL_FLAGS)
    dataset, dataset_path = dataset_from_flags(args.dataset, args.dataset_path)
    source = SimpleNamespace(dataset=dataset, dataset_path=dataset_path, split=args.split, limit=args.limit,
                             shuffle_seed=args.shuffle_seed, question_field=args.question_field,
                             answer_field=args.answer_field, id_field=args.id_field)  # fmt: skip
    problems = [LabelProblem(p.qid, p.question, p.gold)
                for p in load_problems(source, "--dataset", args.dataset, args.skip_bad_rows)]
    name = Path(dataset_path).stem if dataset == "jsonl" and dataset_path else dataset
    out = Path(args.out) if args.out else Path("runs") / f"labels-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    policy_args = dict(args.policy_arg)
    if args.prompt_format is not None:
        policy_args["prompt_format"] = args.prompt_format
    judge_args = dict(args.judge_arg)
    if judge_args and not (cfg.uses_judge and args.judge):
        raise FlagError("--judge-arg", _pairs_text(args.judge_arg),
                        "needs --judge MODEL with --method judge or consensus (a judge of its own)")
    set_threads(args.threads)
    backends = functools.partial(label_backends, args.policy, args.policy_backend, args.judge,
                                 args.judge_backend, cfg.uses_judge, policy_args, judge_args,
                                 args.threads)  # fmt: skip
    runner = ray_runner(args, None)  # --ray: each actor calls backends() once, after the plugins
    if runner is not None:
        backends = in_workers(args, backends)
    provenance = {
        "policy": args.policy or "embedded arith policy", "policy_backend": args.policy_backend,
        "judge": (args.judge or args.policy or "embedded arith policy") if cfg.uses_judge else None,
        "judge_backend": args.judge_backend if cfg.uses_judge else None,
        "dataset": name, "split": args.split, "seed": cfg.seed, "prmsearch": __version__,
    }  # fmt: skip
    # Backend arguments change the samples (a prompt format, a dtype), so a resume must keep them;
    # recorded only when given, so folders written before these flags existed still resume.
    if policy_args:
        provenance["policy_args"] = policy_args
    if judge_args:
        provenance["judge_args"] = judge_args

    def progress(done: int, total: int) -> None:
        if not args.no_progress:
            print(f"labelled {done}/{total} problems", file=sys.stderr, flush=True)

    try:
        summary = run_labelling(cfg, problems, out, backends=backends, runner=runner, resume=args.resume,
                                retry_errors=args.retry_errors, provenance=provenance,
                                progress=progress, set_aside_damaged=args.set_aside_damaged)  # fmt: skip
    except ResultsFolderError as exc:
        raise FlagError("--out", str(out), cli_text(exc)) from None
    if args.json:
        print(json.dumps(summary))
    else:
        kept = f"{summary['labelled']}/{summary['solutions']} solutions labelled"
        if summary["retention"] is not None:
            kept += f" (retention {summary['retention']:.1%})"
        print(f"{kept}, {summary['steps']} steps ({summary['negative_steps']} wrong); statuses "
              f"{summary['statuses']}\nlabels: {out / 'labels.jsonl'}  stepwise: {out / 'stepwise.jsonl'}")
    errors = summary["statuses"].get("error", 0)
    if errors:
        print(f"prmsearch label: {errors} solutions or problems ended in an error (their rows in "
              f"{out / 'labels.jsonl'} say why)", file=sys.stderr)
        return 1
    return 0


def label_backends(policy: str | None, policy_backend: str | None, judge: str | None,
                   judge_backend: str | None, uses_judge: bool, policy_args: dict | None = None,
                   judge_args: dict | None = None, threads: int | None = None):
    """(policy, judge) of ``label``'s flags; the judge is the policy itself unless ``--judge`` names
    one, and None when the method needs no judge. Module-level, so ``functools.partial`` of it
    pickles to Ray actors (which also take ``--threads`` here, in their own process)."""
    set_threads(threads)
    model = load_policy(policy, policy_backend, kwargs=policy_args)
    if not uses_judge:
        return model, None
    return model, (load_policy(judge, judge_backend, "--judge", kwargs=judge_args) if judge else model)


def _pairs_text(pairs: list[tuple[str, object]]) -> str:
    """``KEY=VALUE`` pairs as they were typed, for an error message."""
    return " ".join(f"{key}={value}" for key, value in pairs)


#: LabelConfig fields and the flags that set them, where the names differ.
_LABEL_FLAGS = {"solution_max_tokens": "--max-solution-tokens"}


def _add_label(sub) -> None:
    label = sub.add_parser(
        "label",
        help="sample solutions and label their steps: Monte Carlo, an LLM judge, or their consensus",
        description="Labels steps of the policy's own solutions for PRM training, as in \"The Lessons of "
        "Developing Process Reward Models\": mc (rollouts from every step prefix), judge (a model names "
        "the earliest wrong paragraph), consensus (kept where both agree). Writes labels.jsonl (every "
        "solution, soft values, verdicts, provenance) and stepwise.jsonl (prompt, completions, labels: "
        "the layout of TRL's PRM trainer).",
    )
    label.add_argument("--method", choices=("mc", "judge", "consensus"), default="mc",
                       help="how steps are labelled (default: mc)")
    label.add_argument("--dataset", default="arith", help="a dataset name or FILE.jsonl with questions and "
                       "gold answers (default: arith)")
    label.add_argument("--dataset-path", default=None, help="local file (or folder) of a named dataset")
    label.add_argument("--split", default=None, help="dataset split (arith: train, validation or test)")
    label.add_argument("--limit", type=int_at_least(1), default=None, help="the first N problems only")
    label.add_argument("--shuffle-seed", type=int, default=None, help="shuffle the problems before --limit")
    label.add_argument("--question-field", default=None, help="row field of the question (JSONL datasets)")
    label.add_argument("--answer-field", default=None, help="row field of the gold answer (JSONL datasets)")
    label.add_argument("--id-field", default=None, help="row field of a unique id (JSONL datasets)")
    label.add_argument("--skip-bad-rows", action="store_true", help="skip malformed dataset rows")
    label.add_argument("--policy", default=None, help="the policy that writes solutions: a backend name, "
                       "model folder or Hub id (default: embedded)")
    label.add_argument("--policy-backend", default=None, help="backend for a policy model path (default: hf)")
    label.add_argument("--judge", default=None, help="the judge for judge/consensus: a backend name, model "
                       "folder or Hub id (default: the policy itself)")
    label.add_argument("--judge-backend", default=None, help="backend for a judge model path (default: hf)")
    label.add_argument(
        "--prompt-format", default=None, metavar="NAME",
        help="the policy's prompt format: auto (default), step-by-step, chat, plain, qwen25-math-cot, "
        "llama3-math",
    )
    label.add_argument(
        "--policy-arg", action="append", type=option_type("KEY=VALUE (e.g. max_model_len=4096)"),
        default=[], metavar="KEY=VALUE", help="a keyword argument of the policy backend, e.g. "
        "max_model_len=4096 (repeatable; recorded in the manifest, so a resume must keep it)",
    )
    label.add_argument(
        "--judge-arg", action="append", type=option_type("KEY=VALUE (e.g. dtype=float32)"), default=[],
        metavar="KEY=VALUE", help="a keyword argument of the judge's backend (repeatable; needs --judge)",
    )
    label.add_argument("--threads", type=int_at_least(1), default=None,
                       help="torch CPU threads for in-process models (default: torch's own; 1 is often "
                       "fastest for tiny models on a busy machine)")
    label.add_argument("--samples", type=int_at_least(1), default=4, help="solutions per problem (default 4)")
    label.add_argument("--rollouts", type=int_at_least(1), default=8,
                       help="MC completions per distinct step prefix (default: 8)")
    label.add_argument("--mc-threshold", type=float, default=0.0,
                       help="a step whose MC value is at or below this is wrong (default: 0)")
    label.add_argument("--judge-samples", type=int_at_least(1), default=3,
                       help="judge verdicts per solution, majority-voted (default: 3)")
    label.add_argument("--temperature", type=float, default=0.7, help="policy temperature (default: 0.7)")
    label.add_argument("--judge-temperature", type=float, default=0.7,
                       help="judge temperature; one judge sample is greedy (default: 0.7)")
    label.add_argument("--max-solution-tokens", type=int_at_least(1), default=1024,
                       help="token limit of one solution or rollout (default: 1024)")
    label.add_argument("--judge-max-tokens", type=int_at_least(1), default=1024,
                       help="token limit of one judge critique (default: 1024)")
    label.add_argument("--delimiter", default="\n\n", help="step delimiter (default: blank line)")
    label.add_argument("--seed", type=int, default=0, help="run seed (default: 0)")
    label.add_argument("--chunk", type=int_at_least(1), default=16,
                       help="problems per batched run and per write to disk (default: 16)")
    label.add_argument("--out", default=None, help="output folder (default: runs/labels-<dataset>-<time>)")
    label.add_argument("--resume", action="store_true", help="continue the run in --out")
    label.add_argument("--retry-errors", action="store_true", help="with --resume: also label again the "
                       "problems that have a row in error (a judge or server failure); their new rows "
                       "replace the old ones")
    add_ray_arguments(label, "policy and judge")
    label.add_argument("--set-aside-damaged", action="store_true",
                       help="with --resume: move lines of labels.jsonl that are not whole rows to "
                       "labels.jsonl.damaged (never deleted) and label their problems again")
    label.add_argument("--json", action="store_true", help="print summary.json")
    label.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    label.set_defaults(func=cmd_label)


def _stepwise_rows(data: str, targets: str = "labels") -> list[dict]:
    """``--data``: a stepwise JSONL file, or ``hub:<dataset id>[:split]`` (needs ``datasets``);
    with ``--targets mc``, a ``label`` run's ``labels.jsonl`` whose soft MC values become the
    training targets."""
    from prmsearch.prm.stepwise_train import mc_target_rows, read_stepwise

    if targets == "mc":
        with flag_context("--data", data, "--targets mc reads the labels.jsonl of a `prmsearch label "
                          "--method mc` run (its folder's manifest.json beside it)"):
            return mc_target_rows(Path(data))
    if not data.startswith("hub:"):
        fix = "give a stepwise JSONL file (prmsearch label writes stepwise.jsonl)"
        with flag_context("--data", data, fix):
            return read_stepwise(data)
    name, _, split = data[len("hub:"):].partition(":")
    with flag_context("--data", data, "install `datasets` and give hub:<dataset id>[:split]"):
        import datasets

        table = datasets.load_dataset(name, split=split or "train")
        return [{"prompt": r["prompt"], "completions": list(r["completions"]), "labels": list(r["labels"])}
                for r in table]


def cmd_train_prm(args: argparse.Namespace) -> int:
    """``prmsearch train-prm``: a qwen-prm PRM from any causal LM on stepwise data."""
    from prmsearch.prm.stepwise_train import StepwiseTrainConfig, train_stepwise_prm

    values = {
        "train": args.train, "steps": args.steps, "batch_size": args.batch_size,
        "grad_accum": args.grad_accum, "lr": args.lr,
        "warmup": args.warmup, "max_length": args.max_length, "validation_fraction": args.validation_fraction,
        "bf16": args.bf16, "device": args.device, "gguf_file": args.gguf_file, "threads": args.threads,
        "seed": args.seed, "log_every": args.log_every,
    }  # fmt: skip
    cfg = config_from_flags(StepwiseTrainConfig, values)
    rows = _stepwise_rows(args.data, args.targets)
    if args.base is None:
        from prmsearch.arith.models import default_policy_path

        base = str(default_policy_path())
    else:
        base = args.base
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise FlagError("--out", str(out), "holds files already; give a new or empty folder")

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    with flag_context("--base", base, "give a Hugging Face causal LM folder or Hub id (and --gguf-file "
                      "for a GGUF checkpoint)"):
        report = train_stepwise_prm(base, rows, out, cfg, log=log, data=args.data)
    if args.json:
        print(json.dumps(report))
    else:
        val = report["validation"]
        tail = (f"; held out: step accuracy {val['step_accuracy']:.3f}, first-error F1 "
                f"{val['first_error']['f1']:.3f} on {val['rows']} rows") if val else ""
        print(f"trained on {report['train_rows']} rows in {report['seconds']:.0f}s, loss "
              f"{report['loss_first']:.3f} -> {report['loss_last']:.3f}{tail}\nPRM: {out} (use it with "
              f"--prm {out} --prm-family qwen-prm)")
    return 0


def _add_train_prm(sub) -> None:
    train = sub.add_parser(
        "train-prm",
        help="train a PRM (qwen-prm layout) from any causal LM on stepwise-labelled data",
        description="Trains the Qwen2.5-Math-PRM head (Linear-ReLU-Linear(2) at a separator after every "
        "step) on a base causal LM, with the loss at the separators, from JSONL rows {prompt, completions, "
        "labels} (what prmsearch label writes, or a Hub dataset in that layout). The folder it writes is "
        "read by --prm FOLDER --prm-family qwen-prm.",
    )
    train.add_argument("--data", required=True, help="stepwise JSONL file, or hub:<dataset id>[:split]")
    train.add_argument("--targets", choices=("labels", "mc"), default="labels",
                       help="labels: the rows' hard step labels (default); mc: --data is a `label --method "
                       "mc` run's labels.jsonl and each step trains toward its soft MC value, the "
                       "solution's own outcome counted as one more rollout")
    train.add_argument("--base", default=None, help="causal LM folder or Hub id (default: embedded policy)")
    train.add_argument("--out", required=True, help="folder for the trained PRM (new or empty)")
    train.add_argument("--steps", type=int, default=1000, help="optimiser steps (default: 1000)")
    train.add_argument("--batch-size", type=int, default=8, help="rows per forward pass (default: 8)")
    train.add_argument("--grad-accum", type=int, default=1, help="forward passes per step (default: 1)")
    train.add_argument("--train", choices=("full", "head"), default="full",
                       help="full: train the base and the head (a GPU's mode); head: freeze the base, "
                       "compute its features at the separators once and train the head alone (a CPU's "
                       "mode: one forward pass per row) (default: full)")
    train.add_argument("--lr", type=float, default=None,
                       help="peak learning rate (default: 2e-5 with --train full, 1e-3 with --train head)")
    train.add_argument("--warmup", type=int, default=50, help="warm-up steps (default: 50)")
    train.add_argument("--max-length", type=int, default=2048, help="skip longer rows (tokens; default 2048)")
    train.add_argument("--validation-fraction", type=float, default=0.05,
                       help="share of problems held out for the final report (default: 0.05)")
    train.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                       help="bfloat16 autocast (default: on a CUDA GPU that supports it)")
    train.add_argument("--device", default=None, help="cuda, cpu, ... (default: CUDA when available)")
    train.add_argument("--gguf-file", default=None, help="a GGUF file inside --base to load")
    train.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    train.add_argument("--seed", type=int, default=0, help="data order, head, held-out split (default 0)")
    train.add_argument("--log-every", type=int, default=50, help="steps between loss lines (default: 50)")
    train.add_argument("--json", action="store_true", help="print the training report as JSON")
    train.add_argument("--quiet", action="store_true", help="no loss lines on stderr")
    train.set_defaults(func=cmd_train_prm)
