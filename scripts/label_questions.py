"""Take the questions out of a ``prmsearch label`` folder, or put them back from the dataset.

A label run on GSM8K's train split holds each problem's question in every row (``prompt``).
The project keeps such runs in ``results/`` so that a later run can train on them or resume
them, but it never copies benchmark data into the repository. ``strip`` writes a copy of the
folder whose rows carry ``prompt: null`` (everything else, the model's own steps and labels
included, is kept); ``restore`` fills the questions back in from the dataset by problem id and
checks each one against the digest the manifest recorded, where it has one.

    python scripts/label_questions.py strip RUNS/labels results/real-models/labels
    python scripts/label_questions.py restore results/real-models/labels RUNS/labels \
        --dataset gsm8k --split train
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROWS = "labels.jsonl"
KEEP = ("manifest.json", "summary.json")


def _copy(source: Path, target: Path, fill) -> int:
    """Copy the label folder ``source`` to ``target``, each row passed through ``fill(number, row)``
    (a torn last line, left by a run still writing, is left for that run's resume)."""
    target.mkdir(parents=True, exist_ok=True)
    rows = 0
    with (source / ROWS).open(encoding="utf-8") as read, (target / ROWS).open("w", encoding="utf-8") as write:
        for number, line in enumerate(read, start=1):
            if not line.endswith("\n"):
                break
            write.write(json.dumps(fill(number, json.loads(line))) + "\n")
            rows += 1
    for name in KEEP:
        if (source / name).exists():
            shutil.copy2(source / name, target / name)
    return rows


def strip(source: Path, target: Path) -> int:
    """Copy ``source`` to ``target`` with every row's ``prompt`` set to null; returns the rows."""
    return _copy(source, target, lambda number, row: {**row, "prompt": None})


def restore(source: Path, target: Path, dataset: str, split: str | None) -> int:
    """Copy ``source`` to ``target`` with each row's question read back from the dataset."""
    from prmsearch.benchmarks.datasets import load_dataset
    from prmsearch.benchmarks.sweeps.results import problem_digests
    from prmsearch.benchmarks.sweeps.sweep import sweep_problems

    # the problems as `prmsearch label` read them (gold answers extracted the same way)
    questions = {p.qid: (p.question, p.gold) for p in sweep_problems(load_dataset(dataset, split=split))}
    recorded = json.loads((source / "manifest.json").read_text()).get("problems") or {}

    def fill(number: int, row: dict) -> dict:
        qid = row["problem_id"]
        if qid not in questions:
            raise SystemExit(f"{source / ROWS}:{number}: problem {qid!r} is not in {dataset} {split or ''}")
        question, gold = questions[qid]
        if qid in recorded and recorded[qid] != problem_digests([(qid, question, gold)])[qid]:
            raise SystemExit(f"{source / ROWS}:{number}: problem {qid!r} differs from the one labelled")
        return {**row, "prompt": question}

    return _copy(source, target, fill)


def add_restore_parser(sub, help_text: str) -> None:
    """The ``restore SOURCE TARGET --dataset NAME [--split SPLIT]`` subcommand's arguments."""
    back = sub.add_parser("restore", help=help_text)
    back.add_argument("source", type=Path)
    back.add_argument("target", type=Path)
    back.add_argument("--dataset", required=True)
    back.add_argument("--split", default=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    out = sub.add_parser("strip", help="copy a label folder without its questions")
    out.add_argument("source", type=Path)
    out.add_argument("target", type=Path)
    add_restore_parser(sub, "copy a stripped label folder with its questions read back")
    args = parser.parse_args(argv)
    if args.command == "strip":
        rows = strip(args.source, args.target)
    else:
        rows = restore(args.source, args.target, args.dataset, args.split)
    print(f"{rows} rows: {args.target / ROWS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
