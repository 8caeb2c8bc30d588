"""A custom scorer: the embedded PRM plus a calculator check, registered by name and used in a search.

Shows the `prmsearch.Scorer` protocol: a `num_parameters` property and a batched
`score(requests) -> list[StepScores]` returning one probability in [0, 1] per step of every
request. `CalculatorCheckedScorer` wraps any PRM and multiplies a step's score by `penalty` when
the step states an equation `a op b = c` whose arithmetic is wrong (a calculator cannot tell
whether the right operation was used; the PRM still judges that). It passes the wrapped PRM's
token counts and model shape through, so the ledger's PRM tokens and FLOPs stay exact.
`register_scorer` makes it a name that `solve`, `resolve_scorer` and sweeps (`SweepConfig(prm=...)`)
accept.

The example first scores a hand-written wrong solution with both scorers (when this was written,
the embedded PRM rated its wrong first step "12 * 2 = 44" at 0.999, one of its false positives),
then runs a beam search with the new scorer.

Run (about ten seconds on a CPU, no download):

    HF_HUB_OFFLINE=1 .venv/bin/python examples/custom_scorer.py
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from prmsearch import (
    Scorer,
    ScoreRequest,
    Searcher,
    StepScores,
    canonical_answer,
    register_scorer,
    resolve_policy,
    resolve_scorer,
)
from prmsearch.arith import load_split

#: "a op b = c" with integers, e.g. "17 * 3 = 51" (the first equation of a step is checked).
EQUATION = re.compile(r"(-?\d+)\s*([-+*/])\s*(-?\d+)\s*=\s*(-?\d+)")


def equation_holds(step: str) -> bool | None:
    """Whether the step's equation is arithmetically right; None when the step states none."""
    match = EQUATION.search(step)
    if match is None:
        return None
    left, operator, right, claimed = match.groups()
    a, b, c = int(left), int(right), int(claimed)
    if operator == "+":
        return a + b == c
    if operator == "-":
        return a - b == c
    if operator == "*":
        return a * b == c
    return b != 0 and Fraction(a, b) == c


class CalculatorCheckedScorer:
    """A PRM whose score of a step with wrong arithmetic is multiplied by ``penalty``."""

    def __init__(self, prm: Scorer, penalty: float = 0.05) -> None:
        if not 0.0 <= penalty <= 1.0:
            raise ValueError(f"penalty must be in [0, 1] (scores stay probabilities), got {penalty}")
        self.prm = prm
        self.penalty = penalty
        # The FLOP formula reads a ModelCost from `cost` (else it counts num_parameters as dense):
        # the wrapper runs exactly the wrapped PRM, so it costs what that PRM costs.
        self.cost = getattr(prm, "cost", None)

    @property
    def num_parameters(self) -> int:
        return self.prm.num_parameters

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """The wrapped PRM's scores (one batched call), with the calculator's penalty applied."""
        results = self.prm.score(requests)
        checked = []
        for request, result in zip(requests, results, strict=True):
            factors = [self.penalty if equation_holds(step) is False else 1.0 for step in request.steps]
            scores = np.asarray(result.scores, dtype=np.float64) * np.array(factors)
            checked.append(StepScores(scores, result.tokens_computed, result.tokens_cached))
        return checked

    def clear_caches(self) -> None:
        """Forwarded, so a sweep can start each cell with the wrapped PRM's caches cold."""
        clear = getattr(self.prm, "clear_caches", None)
        if callable(clear):
            clear()


def calculator_checked_arith_prm(penalty: float = 0.05) -> CalculatorCheckedScorer:
    """The factory behind the registered name: the embedded PRM with the calculator check."""
    return CalculatorCheckedScorer(resolve_scorer(None), penalty=penalty)


register_scorer(
    "calculator-checked-arith", calculator_checked_arith_prm, "the embedded PRM with a calculator check"
)


def main() -> None:
    checked_prm = resolve_scorer("calculator-checked-arith")  # made by name, like a built-in
    assert isinstance(checked_prm, Scorer)  # the protocol is checkable at run time
    assert isinstance(checked_prm, CalculatorCheckedScorer)

    question = "Start with 12. Multiply by 2. Subtract 5. Add 13. What is the result?"
    wrong_solution = ("12 * 2 = 44", "44 - 5 = 39", "39 + 13 = 52. The answer is \\boxed{52}")
    request = ScoreRequest(question, wrong_solution)
    (plain,) = checked_prm.prm.score([request])
    (checked,) = checked_prm.score([request])
    print(f"scoring a wrong solution to: {question}")
    print("  embedded PRM | calculator-checked | step")
    for plain_score, checked_score, step in zip(plain.scores, checked.scores, wrong_solution, strict=True):
        print(f"  {plain_score:12.3f} | {checked_score:18.3f} | {step}")

    problems = load_split("test", 4)
    searcher = Searcher(resolve_policy(None), checked_prm, "beam", n=4, width=2, seed=0)
    results = searcher.run([problem.question for problem in problems])
    correct = 0
    print("beam search (n=4, width=2) with the calculator-checked PRM:")
    for problem, result in zip(problems, results, strict=True):
        correct += result.answer is not None and canonical_answer(result.answer) == str(problem.answer)
        scores = ", ".join(f"{score:.3f}" for score in result.step_scores)
        print(f"  {problem.id}: answer {result.answer} (gold {problem.answer}), step scores {scores}")
    assert searcher.last_ledger is not None
    ledger = searcher.last_ledger
    print(
        f"accuracy: {correct}/{len(problems)}, {ledger.prm_tokens_computed} PRM tokens, "
        f"total FLOPs {ledger.flops:.3e}"
    )


if __name__ == "__main__":
    main()
