"""The ``export`` command: saved search trees as TRL datasets (:mod:`prmsearch.export`).

``prmsearch export SOURCE... --kind sft|preference|stepwise --out DIR`` reads bench runs saved
with ``--save-trees``, ``label`` runs and tree files, and writes ``data.jsonl``, a ``datasets``
folder and (with ``--format parquet``) Parquet, with a card. Inputs it cannot use are listed on
stderr and in the card; the rest is exported. Exit status 0 when rows were written, 2 on bad
flags or when no input could be read.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from prmsearch.cli.errors import FlagError

__all__ = ["cmd_export", "register_export_command"]


def _system(args: argparse.Namespace) -> str | None:
    """The chat system prompt: ``--system``, or the one of ``--prompt-format``."""
    if args.prompt_format is None:
        return args.system
    if args.system is not None:
        raise FlagError("--prompt-format", args.prompt_format, "give --system or --prompt-format, not both")
    from prmsearch.engines.prompt_formats import get_prompt_format

    fmt = get_prompt_format(args.prompt_format)
    if not fmt.chat:
        fix = "is not a chat format; text rows need no system prompt"
        raise FlagError("--prompt-format", args.prompt_format, fix)
    return fmt.system


def _command(args: argparse.Namespace, config) -> str:
    """The command line that makes this export again (for the card)."""
    words = ["prmsearch", "export", *args.sources, "--kind", config.kind, "--out", args.out]
    flags = {"--style": config.style, "--paths": config.paths, "--reference": config.reference,
             "--aggregation": config.aggregation}  # fmt: skip
    if config.kind == "preference":
        flags.update(
            {"--pairs": config.pairs, "--min-margin": config.min_margin, "--max-pairs": config.max_pairs}
        )
    if config.kind == "stepwise":
        flags.update({"--step-labels": config.step_labels, "--threshold": config.threshold,
                      "--mc-threshold": config.mc_threshold, "--checker": args.checker})  # fmt: skip
    flags.update({"--strategy": args.strategy, "--budget": args.budget, "--seed": args.seed})
    for flag, value in flags.items():
        if value is not None:
            words += [flag, str(value)]
    if args.prompt_format:
        words += ["--prompt-format", args.prompt_format]
    elif args.system:
        words += ["--system", args.system]
    if args.keep_duplicates:
        words.append("--keep-duplicates")
    return " ".join(shlex.quote(w) for w in words)


def cmd_export(args: argparse.Namespace) -> int:
    from prmsearch.export import ExportConfig, SourceFilter, export_dataset, scorer_checker
    from prmsearch.export.writers import FORMATS

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    for name in formats:
        if name not in FORMATS:
            raise FlagError("--format", name, f"choose from {', '.join(FORMATS)} (comma-separated)")
    if args.step_labels == "checker" and not args.checker:
        raise FlagError(
            "--step-labels", "checker", "name the checker scorer with --checker (e.g. arith-oracle)"
        )
    system = _system(args)
    try:
        config = ExportConfig(
            kind=args.kind,
            style=args.style,
            paths=args.paths or ("all" if args.kind == "stepwise" else "correct"),
            pairs=args.pairs,
            reference=args.reference,
            aggregation=args.aggregation,
            step_labels=args.step_labels,
            threshold=args.threshold,
            mc_threshold=args.mc_threshold,
            min_margin=args.min_margin,
            max_pairs=args.max_pairs,
            dedup=not args.keep_duplicates,
            delimiter=args.delimiter.encode("utf-8").decode("unicode_escape"),
            system=system,
        )
    except ValueError as exc:
        raise FlagError("--" + str(exc).split(" ")[0].replace("_", "-"), None, str(exc)) from None
    keep = SourceFilter(args.strategy, args.budget, args.seed)
    command = _command(args, config)
    report = export_dataset(
        args.sources,
        config,
        args.out,
        formats=formats,
        keep=keep,
        checker=scorer_checker(args.checker) if args.checker else None,
        command=command,
    )
    for error in report.errors:
        print(f"prmsearch export: left out: {error}", file=sys.stderr)
    counts = report.counts()
    print(
        f"{counts['rows']} {config.kind} rows from {counts['problems_with_rows']} of "
        f"{counts['problems_read']} problems -> {args.out}"
    )
    return 0


def register_export_command(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export",
        help="saved search trees as TRL datasets: SFT rows, DPO pairs, stepwise labels",
        description=(
            "Read bench runs saved with --save-trees, label runs (labels.jsonl) or tree files, grade "
            "each path against the gold answer (or, without one, the PRM-weighted vote), and write "
            "data.jsonl, a datasets folder and a card into --out."
        ),
    )
    parser.add_argument(
        "sources", nargs="+", help="bench run folders, label runs, tree files or folders of them"
    )
    parser.add_argument(
        "--kind",
        required=True,
        choices=("sft", "preference", "stepwise"),
        help="sft: prompt/completion rows; preference: DPO pairs; stepwise: per-step labels",
    )
    parser.add_argument("--out", required=True, help="folder for data.jsonl, dataset/, the card")
    parser.add_argument(
        "--style",
        default="text",
        choices=("text", "chat", "messages"),
        help="text: plain strings (question + delimiter as prompt); chat: lists of messages; "
        "messages: one messages column (sft)",
    )
    parser.add_argument(
        "--paths",
        default=None,
        choices=("chosen", "correct", "best-correct", "all"),
        help="which paths: the search's chosen one, every right one, the best-scored right "
        "one, or all (stepwise; default) (default for sft: correct)",
    )
    parser.add_argument(
        "--pairs",
        default="both",
        choices=("solution", "step", "both"),
        help="preference pairs: whole solutions, sibling steps at branching points, or both",
    )
    parser.add_argument(
        "--reference",
        default="auto",
        choices=("auto", "gold", "vote", "score"),
        help="what grades a path: gold where present else the PRM-weighted vote (auto), gold "
        "only, always the vote (TTRL), or nothing (rank by PRM score)",
    )
    parser.add_argument(
        "--aggregation",
        default="min",
        choices=("min", "mean", "prod", "last"),
        help="how a path's step scores make its score (default: min)",
    )
    parser.add_argument(
        "--step-labels",
        default="prm",
        choices=("prm", "mc", "source", "checker"),
        help="stepwise labels: PRM score >= --threshold, the tree's MC value > "
        "--mc-threshold, a label run's own labels, or --checker's scores",
    )
    parser.add_argument(
        "--checker",
        default=None,
        metavar="SCORER",
        help="a checker scorer for --step-labels checker (e.g. arith-oracle)",
    )
    parser.add_argument("--threshold", type=float, default=0.5, help="score threshold of a right step")
    parser.add_argument(
        "--mc-threshold",
        type=float,
        default=0.0,
        help="a step is right when the share of right paths below it is above this (default 0)",
    )
    parser.add_argument(
        "--min-margin", type=float, default=0.0, help="drop pairs whose values differ by less"
    )
    parser.add_argument("--max-pairs", type=int, default=0, help="at most K pairs per problem (0: no limit)")
    parser.add_argument("--keep-duplicates", action="store_true", help="keep rows whose text repeats")
    parser.add_argument("--delimiter", default="\\n\\n", help="text between steps (default: blank line)")
    parser.add_argument("--system", default=None, help="a system prompt for the chat styles")
    parser.add_argument(
        "--prompt-format", default=None, metavar="NAME",
        help="chat styles: the system prompt of this prompt format (e.g. step-by-step, the default of "
        "chat models in a search), so the trained model is prompted as the search prompted it",
    )
    parser.add_argument("--strategy", default=None, help="bench runs: only this strategy's trees")
    parser.add_argument("--budget", type=int, default=None, help="bench runs: only this budget's trees")
    parser.add_argument("--seed", type=int, default=None, help="bench runs: only this seed's trees")
    parser.add_argument(
        "--format",
        default="jsonl,disk",
        help="comma-separated: jsonl, disk (datasets.save_to_disk), parquet (default: jsonl,disk)",
    )
    parser.set_defaults(func=cmd_export)
