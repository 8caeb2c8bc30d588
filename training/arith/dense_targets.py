"""Dense PRM targets: a label on every solution token, not only at the step separators.

A label per step tells the PRM *that* a step is wrong but not *where*, so the comparison it has to
learn (the digits written against the digits its body predicts) gets one bit of signal per step,
read far from the digits. Here every token of the assistant turn is labelled with whether the
solution is still right up to and including it: the token holding the first wrong character and
everything after it are 0, everything before it is 1. The label at each ``<extra_0>`` equals the
checker's step label, so the dense targets only add supervision; inference reads the same
positions as before.

Where the first error starts: the checker names the first wrong step; every step before it is
right, so the value before it is the gold value and the gold step at that index is the one right
text (the policy writes the gold format). The first character where the two differ is the first
wrong one; a step that is a prefix of the gold step (it stopped early) is wrong from the separator
after it.

A second, local kind (`local_targets`) labels only the digits of each step's result, by whether
the step computes right from its own operands (the digits from the first one that differs from
the exact result are 0). Once a solution has gone wrong, its later steps usually compute right
from the wrong value, so local labels hold one "compare the written result with the computed
one" example per step instead of one per solution: the comparison a PRM has to learn, without
the need to carry an earlier error along. The step labels at the separators carry that part.

A third kind (`step_targets`) extends the local labels to the rest of each step: the value it
starts from (the previous step's written result, or the start number), the operation and the
operand (the problem's operation of that step) are labelled too, so errors of the wrong
operation or operand, which a result-only label never marks, get the same local supervision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prmsearch.arith.checker import step_arithmetic
from prmsearch.arith.problems import ArithProblem

__all__ = ["DenseTargets", "dense_targets", "first_wrong_offset", "local_targets", "step_targets"]


@dataclass(frozen=True)
class DenseTargets:
    """Token ids of the PRM input and a 1/0 target for each labelled token position."""

    ids: list[int]
    positions: list[int]
    targets: list[float]


def first_wrong_offset(
    problem: ArithProblem, steps: Sequence[str], first_error: int, separator: str
) -> int | None:
    """Offset of the first wrong character in ``separator.join(steps) + separator``.

    ``first_error`` is the checker's first wrong step (-1: the solution is right, None returned).
    """
    if first_error < 0:
        return None
    if first_error >= len(steps):
        raise ValueError(f"first_error {first_error} is past the last of {len(steps)} steps")
    start = sum(len(step) + len(separator) for step in steps[:first_error])
    written = steps[first_error]
    if first_error >= len(problem.gold_steps):
        return start  # a step after the last operation: wrong from its first character
    gold = problem.gold_steps[first_error]
    for i, (a, b) in enumerate(zip(written, gold)):
        if a != b:
            return start + i
    return start + min(len(written), len(gold))


def _content_tokens(fmt, question: str, steps: Sequence[str]):
    """The PRM input's ids, each token's character span relative to the assistant turn (the
    steps joined by separators) and the format's own encoding (ids checked equal)."""
    encoded = fmt.encode(question, steps)
    content = fmt.separator_text.join(steps) + fmt.separator_text
    messages = [
        {"role": "system", "content": fmt.system},
        {"role": "user", "content": question},
        {"role": "assistant", "content": content},
    ]
    text = fmt.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    begin = text.rfind(content)
    if begin < 0:
        raise ValueError("the assistant turn is not in the PRM input text; is this the qwen-prm layout?")
    tokens = fmt.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(tokens["input_ids"]) != list(encoded.ids):
        raise ValueError("tokenizing with offsets gave other ids than the PRM format's encoding")
    spans = [(first - begin, last - begin) for first, last in tokens["offset_mapping"]]
    return encoded, spans, len(content)


def local_targets(fmt, question: str, steps: Sequence[str]) -> DenseTargets:
    """Targets on the result digits of every ``"a OP b = c"`` step: 1 up to the first digit that
    differs from the exact result of the step's own operands, 0 from it on."""
    encoded, spans, _ = _content_tokens(fmt, question, steps)
    bad: list[tuple[int, int, int]] = []  # (result start, result end, first wrong char)
    start = 0
    for step in steps:
        arithmetic = step_arithmetic(step)
        if arithmetic is not None:
            first, last = arithmetic.result_span
            wrong = last
            if not arithmetic.right:
                exact = "" if arithmetic.exact is None else str(arithmetic.exact)
                wrong = first + _first_difference(arithmetic.written, exact)
                wrong = min(wrong, last - 1)  # a result too long is wrong at its last digit
            bad.append((start + first, start + last, start + wrong))
        start += len(step) + len(fmt.separator_text)
    positions, targets = [], []
    for index, (first, last) in enumerate(spans):
        for lo, hi, wrong in bad:
            if first >= lo and last <= hi and last > first:
                positions.append(index)
                targets.append(0.0 if last > wrong else 1.0)
    return DenseTargets(list(encoded.ids), positions, targets)


def dense_targets(fmt, question: str, steps: Sequence[str], bad_offset: int | None) -> DenseTargets:
    """Per-token targets for the PRM input of ``question`` and ``steps`` in ``fmt``'s layout.

    ``fmt`` is a `QwenPRMFormat`; ``bad_offset`` comes from `first_wrong_offset`. Tokens of the
    assistant turn (steps and separators) are labelled; the prompt and the closing tokens are not.
    """
    encoded, spans, end = _content_tokens(fmt, question, steps)
    positions, targets = [], []
    for index, (first, last) in enumerate(spans):
        if first >= 0 and last <= end and last > first:
            positions.append(index)
            targets.append(0.0 if bad_offset is not None and last > bad_offset else 1.0)
    missing = set(encoded.positions) - set(positions)
    if missing:
        raise ValueError(f"separator positions {sorted(missing)} got no dense target")
    return DenseTargets(list(encoded.ids), positions, targets)


def _mark(spans, positions: list[int], targets: list[float], lo: int, hi: int, wrong: int | None) -> None:
    """Label the tokens that overlap ``[lo, hi)`` (an operator's token may hold the space before
    it): 1 before character ``wrong``, 0 from it on (all 1 when ``wrong`` is None)."""
    for index, (first, last) in enumerate(spans):
        if first < hi and last > lo and last > first:
            positions.append(index)
            targets.append(0.0 if wrong is not None and last > wrong else 1.0)


def _first_difference(written: str, expected: str) -> int:
    """Offset of the first character where ``written`` differs from ``expected``."""
    differing = (i for i, (a, b) in enumerate(zip(written, expected)) if a != b)
    return next(differing, min(len(written), len(expected)))


def step_targets(fmt, problem: ArithProblem, steps: Sequence[str]) -> DenseTargets:
    """Local targets on every part of each ``"a OP b = c"`` step: ``a`` against the value the step
    should start from (the previous step's written result), ``OP`` and ``b`` against the problem's
    operation at that step, ``c`` against the exact result of the step's own ``a OP b``. Steps
    past the problem's last operation, or not of that form, get no targets."""
    encoded, spans, _ = _content_tokens(fmt, problem.question, steps)
    positions: list[int] = []
    targets: list[float] = []
    start, value = 0, problem.start
    for index, step in enumerate(steps):
        arithmetic = step_arithmetic(step)
        if arithmetic is None or index >= len(problem.ops):
            break  # no later step has a defined expectation
        op = problem.ops[index]
        exact = "" if arithmetic.exact is None else str(arithmetic.exact)
        parts = [
            (arithmetic.left_span, str(value) if arithmetic.left != value else None),
            (arithmetic.op_span, op.symbol if arithmetic.symbol != op.symbol else None),
            (arithmetic.operand_span, str(op.operand) if arithmetic.operand != op.operand else None),
            (arithmetic.result_span, None if arithmetic.right else exact),
        ]
        for (lo, hi), expected in parts:
            written = step[lo:hi]
            wrong = None
            if expected is not None:  # the part is wrong: from its first differing character
                wrong = start + lo + min(_first_difference(written, expected), hi - lo - 1)
            _mark(spans, positions, targets, start + lo, start + hi, wrong)
        value = int(arithmetic.written)
        start += len(step) + len(fmt.separator_text)
    return DenseTargets(list(encoded.ids), positions, targets)
