"""Exact step checker for `ArithProblem` solutions.

Why: it gives ground-truth step labels (the first wrong step) and final-answer correctness for
policy samples, for evaluating PRMs and for the search benchmarks. It never raises on model
output: a step that cannot be parsed is a wrong step.

A step is correct when it is ``"a OP b = c"`` where ``a`` is the current value, ``OP b`` is the
next operation of the problem and ``c`` is its exact result. The step of the last operation may
carry the answer (``"... = 17. The answer is \\boxed{17}"``); the answer may also come as its own
step after the last operation (``"The answer is \\boxed{17}"`` or ``"\\boxed{17}"``). A step is wrong
when its arithmetic is wrong, when it does not follow from the previous value and the next
operation (a skipped, repeated or changed operation), when it states an answer before the last
operation, or when it comes after the answer. Accepted spellings: ``*``, ``x``, ``×`` for multiply,
``/``, ``÷`` for divide, ``-`` or ``−`` for minus, optional ``$`` around the answer.
Only the standard library is imported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from prmsearch.arith.problems import ArithProblem, apply_op

__all__ = ["CheckResult", "StepArithmetic", "check_solution", "extract_answer", "step_arithmetic"]

_NUM = r"-?\d{1,9}"
_BOXED = re.compile(r"\\boxed\{\s*(" + _NUM + r")\s*\}")
_SYMBOLS = {"*": "*", "x": "*", "X": "*", "×": "*", "/": "/", "÷": "/", "+": "+", "-": "-", "−": "-"}
_OP_STEP = re.compile(
    r"^\s*(?P<a>"
    + _NUM
    + r")\s*(?P<op>[-+*/xX×÷−])\s*(?P<b>"
    + _NUM
    + r")\s*=\s*(?P<c>"
    + _NUM
    + r")\s*(?P<tail>.*?)\s*$",
    re.DOTALL,
)
_ANSWER_TAIL = re.compile(
    r"^(?:[.,;:]\s*)?(?:(?:The|So the|Thus the)?\s*(?:final\s+)?answer\s+is:?\s*)?\$?\\boxed\{\s*(?P<n>"
    + _NUM
    + r")\s*\}\$?\.?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CheckResult:
    """Outcome of checking a (possibly partial) solution.

    Attributes:
        first_error: index of the first wrong step, -1 when every given step is correct (a
            correct but unfinished prefix also gives -1).
        answer_correct: the solution's answer equals the problem's answer.
        answer: the integer in the last ``\\boxed{...}`` of the solution, None if there is none.
    """

    first_error: int
    answer_correct: bool
    answer: int | None


def extract_answer(steps: Sequence[str]) -> int | None:
    """The integer in the last ``\\boxed{N}`` across the steps, None if there is none."""
    for step in reversed(steps):
        if not isinstance(step, str):
            continue
        found = _BOXED.findall(step)
        if found:
            return int(found[-1])
    return None


def _step_answer(tail: str) -> tuple[bool, int | None]:
    """Parse what follows an operation (or a whole answer-only step).

    Returns ``(ok, answer)``: ``ok`` is False for unparseable text; ``answer`` is the boxed value
    or None when the tail is empty.
    """
    if not tail:
        return True, None
    match = _ANSWER_TAIL.match(tail)
    if match is None:
        return False, None
    return True, int(match.group("n"))


def _first_error(problem: ArithProblem, steps: Sequence[str]) -> int:
    value = problem.start
    n_ops = len(problem.ops)
    answered = False
    for i, step in enumerate(steps):
        if answered or not isinstance(step, str):
            return i  # nothing may follow the answer
        if i >= n_ops:  # all operations done: only an answer-only step may follow
            ok, answer = _step_answer(step.strip())
            if not ok or answer != value:
                return i
            answered = True
            continue
        match = _OP_STEP.match(step)
        if match is None:
            return i
        op = problem.ops[i]
        if (
            int(match.group("a")) != value
            or _SYMBOLS[match.group("op")] != op.symbol
            or int(match.group("b")) != op.operand
        ):
            return i
        result = apply_op(value, op)
        if result is None or int(match.group("c")) != result:
            return i
        ok, answer = _step_answer(match.group("tail"))
        if not ok:
            return i
        if answer is not None:
            if i != n_ops - 1 or answer != result:
                return i  # an answer before the last operation, or a wrong one
            answered = True
        value = result
    return -1


@dataclass(frozen=True)
class StepArithmetic:
    """The arithmetic of one ``"a OP b = c"`` step taken on its own terms.

    Attributes:
        result_span: character span of ``c`` in the step.
        written: ``c`` as written.
        exact: ``a OP b`` computed from the written ``a``, ``OP`` and ``b`` (None: an inexact
            division).
        left_span, op_span, operand_span: character spans of ``a``, ``OP`` and ``b``.
        left, symbol, operand: ``a``, ``OP`` (canonical: ``+ - * /``) and ``b`` as written.
    """

    result_span: tuple[int, int]
    written: str
    exact: int | None
    left_span: tuple[int, int] = (0, 0)
    op_span: tuple[int, int] = (0, 0)
    operand_span: tuple[int, int] = (0, 0)
    left: int = 0
    symbol: str = "+"
    operand: int = 0

    @property
    def right(self) -> bool:
        """``c`` is the exact result of the step's own operands."""
        return self.exact is not None and int(self.written) == self.exact


def step_arithmetic(step: str) -> StepArithmetic | None:
    """Whether a step computes right from its own operands (not whether they are the right ones);
    None when the step is not of the form ``"a OP b = c ..."``."""
    from prmsearch.arith.problems import Op

    match = _OP_STEP.match(step) if isinstance(step, str) else None
    if match is None:
        return None
    op = Op(_SYMBOLS[match.group("op")], int(match.group("b")))
    left = int(match.group("a"))
    return StepArithmetic(match.span("c"), match.group("c"), apply_op(left, op), match.span("a"),
                          match.span("op"), match.span("b"), left, op.symbol, op.operand)  # fmt: skip


def check_solution(problem: ArithProblem, steps: Sequence[str]) -> CheckResult:
    """Check ``steps`` (one string per step, no delimiters) against ``problem``. Never raises."""
    steps = list(steps) if not isinstance(steps, str) else [steps]
    answer = extract_answer(steps)
    return CheckResult(
        first_error=_first_error(problem, steps),
        answer_correct=answer is not None and answer == problem.answer,
        answer=answer,
    )
