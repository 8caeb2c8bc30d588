"""The exact checker as a scorer: the perfect PRM of the arithmetic domain, an upper bound.

A step scores 1 while the solution is right so far and 0 from its first wrong step on. Search
with it shows how much of the gap to pass@N a PRM could close at best.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prmsearch.arith.checker import check_solution
from prmsearch.arith.phrasing import parse_phrased
from prmsearch.arith.problems import ArithProblem, apply_op
from prmsearch.backend_hooks import ScorerBackend
from prmsearch.scorers.base import ScoreRequest, StepScores


def parse_question(question: str) -> ArithProblem | None:
    """Rebuild the problem from its question text, in any known phrasing (None when it is not
    one of ours or a division is inexact)."""
    parsed = parse_phrased(question)
    if parsed is None or not parsed.ops:
        return None
    value: int | None = parsed.start
    for op in parsed.ops:
        value = apply_op(value, op) if value is not None else None
    if value is None:
        return None
    return ArithProblem("parsed", question.strip(), value, parsed.ops, (), parsed.start)


class CheckerScorer(ScorerBackend):
    """Scores every step with the exact checker (for questions of the arithmetic domain)."""

    num_parameters = 0

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        out = []
        for request in requests:
            problem = parse_question(request.question)
            if problem is None:
                raise ValueError(
                    f"the arith-oracle scorer only knows arithmetic questions, got {request.question!r}"
                )
            check = check_solution(problem, request.steps)
            first = check.first_error
            scores = np.ones(len(request.steps))
            if first >= 0:
                scores[first:] = 0.0
            elif request.steps and check.answer is not None and not check.answer_correct:
                scores[-1] = 0.0
            out.append(StepScores(scores))
        return out


def arith_oracle(**_: object) -> CheckerScorer:
    """Factory registered as the ``arith-oracle`` scorer."""
    return CheckerScorer()
