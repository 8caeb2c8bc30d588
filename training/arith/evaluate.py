"""Evaluating arithmetic PRMs: step-level first-error F1 and the accuracy of search they guide.

First-error F1 is ProcessBench's metric: the prediction for a solution is the first step whose
score falls below the threshold (or -1), and F1 is the harmonic mean of the accuracy on
erroneous solutions (the exact first wrong step found) and on correct ones (no step flagged).
The metric itself lives in :mod:`prmsearch.benchmarks.prm_eval.processbench` and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence

from prmsearch.api import Searcher
from prmsearch.arith.problems import ArithProblem
from prmsearch.benchmarks.prm_eval.processbench import (
    FirstErrorReport,
    first_error_report,
    predicted_first_error,
)
from prmsearch.policies.base import Policy, SamplingParams
from prmsearch.scorers.base import Scorer, ScoreRequest

__all__ = [
    "FirstErrorReport",
    "first_error_report",
    "predicted_first_error",
    "score_solutions",
    "search_accuracy",
]


def score_solutions(
    scorer: Scorer, questions: Sequence[str], solutions: Sequence[Sequence[str]], chunk: int = 256
) -> list[list[float]]:
    """Step scores of many solutions, in batched scorer calls."""
    requests = [ScoreRequest(q, tuple(s)) for q, s in zip(questions, solutions, strict=True)]
    out: list[list[float]] = []
    for start in range(0, len(requests), chunk):
        for result in scorer.score(requests[start : start + chunk]):
            out.append([float(v) for v in result.scores])
    return out


def search_accuracy(
    policy: Policy,
    scorer: Scorer,
    problems: Sequence[ArithProblem],
    strategy: str,
    n: int,
    *,
    temperature: float = 1.0,
    seed: int = 0,
    **options,
) -> float:
    """Fraction of ``problems`` whose searched answer equals the gold answer."""
    searcher = Searcher(
        policy, scorer, strategy, sampling=SamplingParams(temperature=temperature, max_new_tokens=160),
        solution_max_tokens=160, seed=seed, n=n, **options,
    )
    results = searcher.run([p.question for p in problems])
    return sum(r.answer == str(p.answer) for r, p in zip(results, problems, strict=True)) / len(problems)
