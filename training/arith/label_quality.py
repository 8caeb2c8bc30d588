"""How good are the labels? ``prmsearch label`` output on the arithmetic domain, scored against
the exact checker (the analogue of human annotation in "The Lessons of Developing PRMs").

For each labelling source in a ``labels.jsonl`` (MC at several thresholds, re-applied to the
stored soft values; the judge; consensus where both are present) and each solution it labelled:
whether its first-error position equals the checker's (first-error accuracy), and, counting a
step labelled wrong as a positive, the step-level precision and recall of "wrong" against the
checker's labels; plus how many solutions the source kept (its retention).

    python -m training.arith label-quality runs/labels-arith-.../labels.jsonl [--thresholds 0,0.5]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prmsearch.arith.problems import ArithProblem, load_split
from prmsearch.benchmarks.prm_eval.prm_bias import first_error_of
from prmsearch.prm.labelling import first_error_from_values, labels_from_first_error
from training.arith.labels import checker_labels


@dataclass
class Agreement:
    """Counts of one label source against the checker."""

    solutions: int = 0
    labelled: int = 0
    first_error_hits: int = 0
    true_wrong: int = 0
    labelled_wrong: int = 0
    checker_wrong: int = 0

    def add(self, first: int | None, checker_first: int, steps: int) -> None:
        self.solutions += 1
        if first is None:
            return
        self.labelled += 1
        self.first_error_hits += first == checker_first
        mine = [not y for y in labels_from_first_error(steps, first)]
        truth = [not y for y in labels_from_first_error(steps, checker_first)]
        self.true_wrong += sum(a and b for a, b in zip(mine, truth))
        self.labelled_wrong += sum(mine)
        self.checker_wrong += sum(truth)

    def to_dict(self) -> dict[str, Any]:
        def share(a: int, b: int) -> float | None:
            return a / b if b else None

        return {
            "solutions": self.solutions,
            "retention": share(self.labelled, self.solutions),
            "first_error_accuracy": share(self.first_error_hits, self.labelled),
            "wrong_step_precision": share(self.true_wrong, self.labelled_wrong),
            "wrong_step_recall": share(self.true_wrong, self.checker_wrong),
        }


def problems_by_id(ids: Iterable[str]) -> dict[str, ArithProblem]:
    """The arithmetic problems behind ``ids`` (``train-00012``, ``validation-00003``...)."""
    needed: dict[str, int] = {}
    for pid in ids:
        split, _, number = pid.rpartition("-")
        if split not in ("train", "validation", "test") or not number.isdigit():
            raise ValueError(f"{pid!r} is not an arithmetic problem id (split-NNNNN); label_quality "
                             "needs the arith dataset's labels")  # fmt: skip
        needed[split] = max(needed.get(split, 0), int(number) + 1)
    found: dict[str, ArithProblem] = {}
    for split, count in needed.items():
        for problem in load_split(split, count):
            found[problem.id] = problem
    return found


def label_quality(rows: Sequence[dict[str, Any]], thresholds: Sequence[float] = (0.0, 0.25, 0.5)
                  ) -> dict[str, dict[str, Any]]:
    """Agreement with the checker of every source the rows carry."""
    problems = problems_by_id({row["problem_id"] for row in rows if row.get("completions")})
    sources: dict[str, Agreement] = {}
    for row in rows:
        steps = row.get("completions") or []
        if not steps or row.get("status") == "error":
            continue
        checker_first, _, _ = checker_labels(problems[row["problem_id"]], steps)
        if row.get("mc_values"):
            for t in thresholds:
                first = first_error_from_values(row["mc_values"], t)
                sources.setdefault(f"mc (value <= {t:g})", Agreement()).add(first, checker_first, len(steps))
        if row.get("judge_verdicts") is not None:
            judge = sources.setdefault("judge", Agreement())
            judge.add(row.get("judge_first_error"), checker_first, len(steps))
        if row.get("method") == "consensus":
            kept = row["labels"] is not None
            first = first_error_of(row["labels"]) if kept else None
            sources.setdefault("consensus", Agreement()).add(first, checker_first, len(steps))
    return {name: agreement.to_dict() for name, agreement in sources.items()}


def markdown(table: dict[str, dict[str, Any]]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    lines = ["| labels | solutions | retention | first-error accuracy | wrong-step precision | "
             "wrong-step recall |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in table.items():
        cells = [str(r["solutions"]), pct(r["retention"]), pct(r["first_error_accuracy"]),
                 pct(r["wrong_step_precision"]), pct(r["wrong_step_recall"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
