"""The exact checker as a scorer: the perfect PRM of the arithmetic domain, an upper bound.

A step scores 1 while the solution is right so far and 0 from its first wrong step on. Search
with it shows how much of the gap to pass@N a PRM could close at best.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from prmsearch.arith.checker import check_solution
from prmsearch.arith.problems import OPS, ArithProblem, Op, apply_op, format_question
from prmsearch.scorers.base import ScoreRequest, StepScores

_WORDS = {phrase: symbol for symbol, phrase in OPS.items()}
_OP = re.compile(r"(Add|Subtract|Multiply by|Divide by) (\d+)\.")
_START = re.compile(r"^Start with (\d+)\.")


def parse_question(question: str) -> ArithProblem | None:
    """Rebuild the problem from its question text (None when it is not one of ours)."""
    start = _START.match(question.strip())
    if start is None:
        return None
    ops = tuple(Op(_WORDS[word], int(n)) for word, n in _OP.findall(question))
    if not ops or format_question(int(start.group(1)), ops) != question.strip():
        return None
    value: int | None = int(start.group(1))
    for op in ops:
        value = apply_op(value, op) if value is not None else None
    if value is None:
        return None
    return ArithProblem("parsed", question.strip(), value, ops, (), int(start.group(1)))


class CheckerScorer:
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
