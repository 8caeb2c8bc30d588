"""Response- and step-level evaluation of a PRM on labelled policy solutions, with the two bias
measures of "The Lessons of Developing Process Reward Models" (Zhang et al., 2025).

Best-of-N accuracy alone rewards a PRM that scores outcomes: policies often reach a right answer
through a wrong step, and a PRM that tolerates those steps still picks right answers. So, over
groups of candidate solutions per problem, each with its first wrong step (-1: none) and whether
its final answer is right (what ``prmsearch label`` writes):

* **response level**: best-of-N accuracy (the answer of the best-scored candidate) and pass@N;
* **step level**: ProcessBench first-error accuracy on erroneous and correct solutions and F1;
* **bias (a), right answer through a wrong step**: among problems with at least one such
  candidate, how often the PRM ranks one first, next to how often a candidate with a fully
  correct process was available to rank first instead;
* **bias (b), outcome-style scoring**: the share of solutions whose lowest step score sits on the
  final step, overall and among solutions whose first error comes before the final step (a
  process PRM puts the minimum at the error), and the share of erroneous solutions whose minimum
  is at their first error.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prmsearch.benchmarks.prm_eval.processbench import first_error_report
from prmsearch.scorers.base import ScoreRequest
from prmsearch.search.aggregation import Aggregation, aggregate_scores
from prmsearch.text_lines import json_rows


@dataclass(frozen=True)
class LabelledCandidate:
    """One labelled solution: its problem, steps, first wrong step (-1: none), final correctness."""

    problem_id: str
    prompt: str
    steps: tuple[str, ...]
    first_error: int
    answer_correct: bool

    @property
    def right_answer_wrong_step(self) -> bool:
        return self.answer_correct and self.first_error >= 0

    @property
    def fully_correct(self) -> bool:
        return self.answer_correct and self.first_error == -1


def first_error_of(labels: Sequence[bool]) -> int:
    """The first step labelled wrong, or -1 (labels follow the first error)."""
    return next((i for i, right in enumerate(labels) if not right), -1)


#: The fields ``read_labelled`` reads from every row (``labels`` may be empty: an unlabelled row).
_LABEL_FIELDS = ("problem_id", "prompt", "completions", "answer_correct")


def read_labelled(path: str | Path) -> list[LabelledCandidate]:
    """The labelled solutions of a ``prmsearch label`` run (``labels.jsonl``); rows without labels
    (unparsable, disagreeing, failed) are left out."""
    out = []
    hint = "a label run killed mid-write leaves a torn last line: `prmsearch label --resume` repairs it"
    for number, row in json_rows(path, hint):
        missing = [k for k in _LABEL_FIELDS if k not in row] if isinstance(row, dict) else list(_LABEL_FIELDS)
        if missing:
            raise ValueError(f"{path}:{number}: not a labels.jsonl row of prmsearch label (it lacks "
                             f"{', '.join(missing)}; rows need {', '.join(_LABEL_FIELDS)} and labels)")
        labels = row.get("labels")
        if not labels:
            continue
        first = first_error_of(labels)
        out.append(LabelledCandidate(str(row["problem_id"]), row["prompt"], tuple(row["completions"]),
                                     first, bool(row["answer_correct"])))  # fmt: skip
    if not out:
        raise ValueError(f"{path} holds no labelled solutions")
    return out


def _argmin_first(scores: Sequence[float]) -> int:
    """Index of the lowest score (the earliest one on ties)."""
    return min(range(len(scores)), key=lambda i: (scores[i], i))


def _share(hits: int, total: int) -> float | None:
    return hits / total if total else None


def bias_report(
    candidates: Sequence[LabelledCandidate],
    scores: Sequence[Sequence[float]],
    aggregation: Aggregation | str = Aggregation.MIN,
    threshold: float = 0.5,
) -> dict[str, Any]:
    """Every figure of the module docstring from candidates and their step scores."""
    aggregation = Aggregation.parse(aggregation)
    groups: dict[str, list[tuple[LabelledCandidate, float]]] = defaultdict(list)
    for cand, values in zip(candidates, scores, strict=True):
        total = aggregate_scores(values, aggregation)
        groups[cand.problem_id].append((cand, total if not math.isnan(total) else -math.inf))
    best_right = any_right = arws_problems = arws_first = correct_available = 0
    for group in groups.values():
        top = max(range(len(group)), key=lambda i: (group[i][1], -i))  # earliest on ties
        best = group[top][0]
        best_right += best.answer_correct
        any_right += any(c.answer_correct for c, _ in group)
        if any(c.right_answer_wrong_step for c, _ in group):
            arws_problems += 1
            arws_first += best.right_answer_wrong_step
            correct_available += any(c.fully_correct for c, _ in group)
    multi = [(c, s) for c, s in zip(candidates, scores) if len(s) >= 2]
    early = [(c, s) for c, s in multi if 0 <= c.first_error < len(s) - 1]
    erroneous = [(c, s) for c, s in zip(candidates, scores) if c.first_error >= 0]
    step = first_error_report([c.first_error for c in candidates], scores, threshold)
    return {
        "aggregation": aggregation.value,
        "problems": len(groups),
        "solutions": len(candidates),
        "response": {
            "best_of_n_accuracy": _share(best_right, len(groups)),
            "pass_at_n": _share(any_right, len(groups)),
        },
        "step": step.to_dict(),
        "right_answer_wrong_step": {
            "solutions": sum(c.right_answer_wrong_step for c in candidates),
            "problems_with_one": arws_problems,
            "ranked_first": _share(arws_first, arws_problems),
            "fully_correct_available": _share(correct_available, arws_problems),
        },
        "min_on_last_step": {
            "all": _share(sum(_argmin_first(s) == len(s) - 1 for _, s in multi), len(multi)),
            "error_before_last": _share(sum(_argmin_first(s) == len(s) - 1 for _, s in early), len(early)),
            "min_at_first_error": _share(
                sum(_argmin_first(s) == c.first_error for c, s in erroneous), len(erroneous)
            ),
        },
    }


def score_candidates(scorer: Any, candidates: Sequence[LabelledCandidate], batch_size: int = 64
                     ) -> list[list[float]]:
    """The PRM's step scores of every candidate, in batches."""
    out: list[list[float]] = []
    for start in range(0, len(candidates), batch_size):
        chunk = candidates[start : start + batch_size]
        results = scorer.score([ScoreRequest(c.prompt, c.steps) for c in chunk])
        out.extend([float(v) for v in r.scores] for r in results)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def bias_markdown(report: dict[str, Any], name: str = "PRM") -> str:
    """One table: response-level, step-level and bias figures of one PRM."""
    a, b, step = report["right_answer_wrong_step"], report["min_on_last_step"], report["step"]
    rows = [
        ("best-of-N accuracy (response level)", _pct(report["response"]["best_of_n_accuracy"])),
        ("pass@N of the candidates", _pct(report["response"]["pass_at_n"])),
        (f"first-error F1 (step level, threshold {step['threshold']})", f"{step['f1']:.3f}"),
        ("  accuracy on erroneous / correct solutions",
         f"{_pct(step['accuracy_erroneous'])} / {_pct(step['accuracy_correct'])}"),
        (f"right answer through a wrong step ranked first ({a['problems_with_one']} problems)",
         _pct(a["ranked_first"])),
        ("  ... while a fully correct solution was available", _pct(a["fully_correct_available"])),
        ("lowest step score on the final step, all solutions", _pct(b["all"])),
        ("  ... solutions whose first error is before the final step", _pct(b["error_before_last"])),
        ("lowest step score at the first error (erroneous solutions)", _pct(b["min_at_first_error"])),
    ]  # fmt: skip
    lines = [f"{name}: {report['solutions']} solutions of {report['problems']} problems, "
             f"{report['aggregation']} aggregation", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"
