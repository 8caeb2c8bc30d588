"""The ``prmsearch aggregate`` and ``prmsearch eval-prm`` subcommands.

``register_commands(subparsers)`` adds them to the CLI's argparse subparsers. Each command maps
its flags onto the frozen config of its module
(:class:`~prmsearch.benchmarks.analysis.aggregate.AggregateConfig`,
:class:`~prmsearch.benchmarks.prm_eval.processbench.EvalPrmConfig`) and returns an exit code: 0
when it ran, 2 on bad input (the reason on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prmsearch.cli.backends import add_prm_backend_argument
from prmsearch.cli.errors import FlagError, option_type

__all__ = ["PROCESSBENCH_DATASETS", "cmd_aggregate", "cmd_eval_prm", "csv_of", "fail", "input_errors",
           "register_commands"]


def _load_champ() -> list[dict[str, Any]]:
    from prmsearch.benchmarks.prm_eval.champ import load_champ_processbench

    return load_champ_processbench()


#: Built-in ProcessBench-format datasets for ``eval-prm --dataset``: name -> loader of row dicts.
PROCESSBENCH_DATASETS: dict[str, Callable[[], list[dict[str, Any]]]] = {"champ": _load_champ}


def _unescape(text: str) -> str:
    """Let shell users write a delimiter as ``\\n\\n``."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


def csv_of(kind: Callable[[str], Any]) -> Callable[[str], tuple]:
    """An argparse type for a comma-separated list of ``kind`` values."""
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(x.strip()) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None

    return parse


def fail(command: str, exc: BaseException) -> int:
    """Print a command's input error the way every subcommand does; the exit status 2."""
    print(f"prmsearch {command}: error: {exc}", file=sys.stderr)
    return 2


def input_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a subcommand reports as bad input (not as a crash)."""
    from prmsearch.benchmarks.prm_eval.champ import ChampUnavailableError

    return (ValueError, KeyError, FileNotFoundError, ChampUnavailableError)


# ---------------------------------------------------------------------------------------------
# aggregate
# ---------------------------------------------------------------------------------------------


def cmd_aggregate(args: argparse.Namespace) -> int:
    """Re-aggregate saved responses: accuracy per selection x aggregation x N."""
    from prmsearch.api import resolve_scorer
    from prmsearch.benchmarks.analysis.aggregate import (
        AggregateConfig,
        load_aggregate_rows,
        markdown_table,
        rows_to_jsonl,
        run_aggregate,
        write_outputs,
    )

    try:
        config = AggregateConfig(
            ns=args.ns,
            subsamples=args.subsamples,
            seed=args.seed,
            selections=args.selections,
            aggregations=args.aggregations,
            delimiter=_unescape(args.delimiter),
            batch_size=args.batch_size,
            skip_bad_rows=args.skip_bad_rows,
        )
        rows, errors = load_aggregate_rows(args.input, skip_bad_rows=config.skip_bad_rows)
        if args.rescore:
            if not args.prm:
                raise FlagError("--rescore", None, "needs --prm (the scorer that scores every response anew)")
            rows = [dataclasses.replace(row, scores=None) for row in rows]
        needs_prm = any(row.scores is None for row in rows)
        wanted = needs_prm and args.prm
        journal = _scoring_journal(args, config.delimiter) if wanted else None
        scorer = resolve_scorer(args.prm, args.prm_family, args.prm_backend,
                                **dict(args.prm_arg)) if wanted else None
        try:
            report, scored = run_aggregate(rows, config, scorer=scorer, errors=errors, journal=journal)
        finally:
            if journal is not None:
                journal.close()
    except input_errors() as exc:
        return fail("aggregate", exc)
    report["input"] = str(args.input)
    if args.write_scores:
        rows_to_jsonl(scored, args.write_scores)
    if args.out:
        write_outputs(report, args.out)
    print(json.dumps(report) if args.json else markdown_table(report), end="" if not args.json else "\n")
    return 0


def _scoring_journal(args: argparse.Namespace, delimiter: str):
    """The journal PRM scores go to as they are made: ``--journal``, else one in ``--out``."""
    from prmsearch.benchmarks.analysis.score_journal import ScoreJournal

    path = args.journal or (Path(args.out) / "scores.journal.jsonl" if args.out else None)
    if path is None:
        return None
    prm = Path(args.prm).expanduser()
    identity = {
        "prm": str(prm.resolve()) if prm.exists() else args.prm,
        "family": args.prm_family,
        "args": {key: str(value) for key, value in sorted(dict(args.prm_arg).items())},
        "delimiter": delimiter,
    }
    if args.prm_backend not in (None, "hf"):  # journals from before the flag still resume
        identity["backend"] = args.prm_backend
    journal = ScoreJournal(path, identity)
    if journal.resumed:
        print(f"prmsearch aggregate: resuming: {journal.resumed} responses already scored in {path}",
              file=sys.stderr)
    return journal


def _add_aggregate(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "aggregate",
        help="accuracy of argmax/majority/weighted x min/last/prod/mean at each N, from saved responses",
        description=(
            "Input: JSONL rows {question, answer, responses: [...], scores: optional (per response a "
            "float or a list of step scores)}. Rows without scores are scored by --prm."
        ),
    )
    parser.add_argument("input", help="JSONL file of questions with responses")
    parser.add_argument("--subsamples", type=int, default=16, help="random subsets per question and N")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsampling draws (default: 0)")
    parser.add_argument(
        "--ns", type=csv_of(int), default=None, help="sizes N, e.g. 1,4,16 (default: powers of 2)"
    )
    parser.add_argument(
        "--selections", type=csv_of(str), default=("argmax", "majority", "weighted"),
        help="comma-separated final selections to compare (default: argmax,majority,weighted)",
    )
    parser.add_argument(
        "--aggregations", type=csv_of(str), default=("min", "last", "prod", "mean"),
        help="comma-separated step-score aggregations to compare (default: min,last,prod,mean)",
    )
    parser.add_argument("--prm", default=None, help="scorer name or PRM model path, for rows without scores")
    parser.add_argument("--prm-family", default=None, help="PRM family of a model path, e.g. qwen-prm")
    add_prm_backend_argument(parser)
    parser.add_argument(
        "--prm-arg", action="append", type=option_type("KEY=VALUE (e.g. dtype=float32)"), default=[],
        metavar="KEY=VALUE", help="a keyword argument of the scorer, e.g. dtype=float32 (repeatable)",
    )
    parser.add_argument(
        "--rescore", action="store_true",
        help="ignore the rows' own scores and score every response with --prm: verifiers compared on "
        "the same samples (scripts/export_samples.py writes a benchmark's samples as rows)",
    )
    parser.add_argument(
        "--delimiter", default="\n\n", help="step delimiter for PRM scoring (default: blank line)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="responses per PRM call")
    parser.add_argument("--skip-bad-rows", action="store_true", help="record malformed rows and go on")
    parser.add_argument("--write-scores", default=None, metavar="PATH", help="save the scored rows as JSONL")
    parser.add_argument(
        "--journal", default=None, metavar="PATH",
        help="append PRM scores here as they are made, and reuse them when the same command runs "
        "again (default: scores.journal.jsonl in --out; none without --out)",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--out", default=None, help="folder for aggregate.json and aggregate.md")
    parser.set_defaults(func=cmd_aggregate)


# ---------------------------------------------------------------------------------------------
# eval-prm
# ---------------------------------------------------------------------------------------------


def _eval_rows(args: argparse.Namespace):
    from prmsearch.benchmarks.prm_eval.processbench import load_rows, rows_from_dicts

    if args.dataset and args.inputs:
        raise ValueError("give input files or --dataset, not both")
    if args.dataset:
        loader = PROCESSBENCH_DATASETS.get(args.dataset)
        if loader is None:
            known = ", ".join(sorted(PROCESSBENCH_DATASETS))
            raise ValueError(f"unknown --dataset {args.dataset!r}; known: {known} (or pass JSONL files)")
        raw = loader()
        return rows_from_dicts(
            enumerate(raw, start=1), source=args.dataset, split=args.dataset,
            split_field=args.split_field, skip_bad_rows=args.skip_bad_rows,
        )  # fmt: skip
    return load_rows(args.inputs, split_field=args.split_field, skip_bad_rows=args.skip_bad_rows)


def cmd_eval_prm(args: argparse.Namespace) -> int:
    """Step-level PRM evaluation on ProcessBench-format rows: first-error accuracy and F1 per split."""
    from prmsearch.api import resolve_scorer
    from prmsearch.benchmarks.prm_eval.processbench import (
        EvalPrmConfig,
        markdown_report,
        predicted_first_error,
        run_eval_prm,
        write_report,
    )

    if args.labels:
        return _eval_prm_on_labels(args)
    try:
        config = EvalPrmConfig(
            threshold=args.threshold,
            tune_on=args.tune_on,
            grid_step=args.grid_step,
            batch_size=args.batch_size,
        )
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        rows, errors = _eval_rows(args)
        if args.limit is not None:
            rows = rows[: args.limit]
        scorer = resolve_scorer(args.prm, args.prm_family, args.prm_backend)
        report, scores = run_eval_prm(scorer, rows, config, errors)
    except input_errors() as exc:
        return fail("eval-prm", exc)
    report["dataset"] = args.dataset or [str(p) for p in args.inputs]
    if args.save_scores:
        with Path(args.save_scores).open("w", encoding="utf-8") as handle:
            for row, values in zip(rows, scores, strict=True):
                predicted = None if values is None else predicted_first_error(values, report["threshold"])
                record = {"id": row.id, "split": row.split, "label": row.label, "scores": values}
                handle.write(json.dumps({**record, "predicted": predicted}) + "\n")
    if args.out:
        write_report(report, args.out)
    print(json.dumps(report) if args.json else markdown_report(report), end="" if not args.json else "\n")
    return 0


def _eval_prm_on_labels(args: argparse.Namespace) -> int:
    """``eval-prm --labels FILE``: response-level, step-level and bias figures on labelled solutions."""
    from prmsearch.api import resolve_scorer
    from prmsearch.benchmarks.prm_eval.prm_bias import (
        bias_markdown,
        bias_report,
        read_labelled,
        score_candidates,
    )

    try:
        if args.inputs or args.dataset:
            raise ValueError("give --labels FILE or ProcessBench inputs/--dataset, not both")
        candidates = read_labelled(args.labels)
        if args.limit is not None:
            candidates = candidates[: args.limit]
        scorer = resolve_scorer(args.prm, args.prm_family, args.prm_backend)
        scores = score_candidates(scorer, candidates, args.batch_size)
        threshold = args.threshold if args.threshold is not None else 0.5
        report = bias_report(candidates, scores, args.aggregation, threshold)
    except input_errors() as exc:
        return fail("eval-prm", exc)
    report["labels"] = str(args.labels)
    report["prm"] = args.prm or "embedded arith PRM"
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "eval_prm_bias.json").write_text(json.dumps(report, indent=2) + "\n")
        (folder / "eval_prm_bias.md").write_text(bias_markdown(report, report["prm"]))
    text = json.dumps(report) + "\n" if args.json else bias_markdown(report, report["prm"])
    print(text, end="")
    return 0


def _add_eval_prm(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "eval-prm",
        help="ProcessBench-style first-error F1 of a PRM, per split",
        description=(
            "Input: ProcessBench JSONL rows {problem, steps: [...], label (first wrong step or -1), id?}. "
            "The first step scored below the threshold is the prediction. With --labels, the labelled "
            "solutions of `prmsearch label` instead: response-level, step-level and bias figures in one "
            "table."
        ),
    )
    parser.add_argument("inputs", nargs="*", help="JSONL/JSON files (several files: one split each)")
    parser.add_argument(
        "--dataset", default=None, help=f"built-in dataset: {', '.join(PROCESSBENCH_DATASETS)}"
    )
    parser.add_argument(
        "--labels", default=None, metavar="FILE",
        help="labels.jsonl of `prmsearch label`: best-of-N accuracy, first-error F1 and the BoN-bias "
        "measures (right answers through wrong steps ranked first; lowest score on the final step)",
    )
    parser.add_argument(
        "--aggregation", default="min", choices=("min", "last", "prod", "mean"),
        help="with --labels: how step scores rank candidates (default: min)",
    )
    parser.add_argument("--split-field", default=None, help="row field whose value is the split, e.g. source")
    parser.add_argument("--threshold", type=float, default=None, help="fixed threshold (default 0.5)")
    parser.add_argument("--tune-on", default=None, metavar="SPLIT", help="tune the threshold on this split")
    parser.add_argument("--grid-step", type=float, default=0.01, help="spacing of the tuning grid")
    parser.add_argument("--prm", default=None, help="scorer name or PRM model path (default: embedded)")
    parser.add_argument("--prm-family", default=None, help="PRM family of a model path, e.g. qwen-prm")
    add_prm_backend_argument(parser)
    parser.add_argument("--batch-size", type=int, default=64, help="rows per PRM call")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N rows")
    parser.add_argument("--skip-bad-rows", action="store_true", help="record malformed rows and go on")
    parser.add_argument("--save-scores", default=None, metavar="PATH", help="save step scores as JSONL")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--out", default=None, help="folder for eval_prm.json and eval_prm.md")
    parser.set_defaults(func=cmd_eval_prm)


def register_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``aggregate`` and ``eval-prm`` to the ``prmsearch`` CLI's subparsers."""
    _add_aggregate(subparsers)
    _add_eval_prm(subparsers)
