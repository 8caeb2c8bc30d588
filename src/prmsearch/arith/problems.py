"""Seeded multi-step arithmetic problems with gold step-by-step solutions.

Why this domain: every step of a solution can be checked exactly (see `checker`), so it gives the
search engine a ground truth for step labels, and it is easy enough for a ~1M-parameter policy to
learn on a 2-core CPU in minutes (see ARITH-NOTES: values up to 99, add/subtract operands up to 20,
start value up to 50, multiply/divide by 2-9, 3-8 operations).

A problem is a start value followed by a chain of operations applied left to right:

    question: "Start with 12. Add 5. Multiply by 3. Divide by 3. What is the result?"
    gold steps: ("12 + 5 = 17", "17 * 3 = 51", "51 / 3 = 17. The answer is \\boxed{17}")

One operation per step; the last operation's step also carries the final ``\\boxed{N}``. A full
solution text is ``"\\n\\n".join(gold_steps)``. Division is always exact and every intermediate
value stays in ``[1, max_value]``.

Splits are fixed and disjoint: ``test`` (200 problems) is drawn first, ``validation`` (200) skips any
question that is in ``test``, and ``train`` (an unbounded stream) skips any question in either.
Only the standard library is imported here, so importing this module never imports torch.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

__all__ = [
    "OPS",
    "SPLIT_SIZES",
    "ArithProblem",
    "Op",
    "ProblemConfig",
    "apply_op",
    "format_step",
    "generate_problem",
    "iter_split",
    "load_split",
    "solution_text",
]

#: operation symbol -> phrase used in the question
OPS: dict[str, str] = {"+": "Add", "-": "Subtract", "*": "Multiply by", "/": "Divide by"}

#: fixed sizes of the evaluation splits; ``train`` is an unbounded stream
SPLIT_SIZES: dict[str, int | None] = {"test": 200, "validation": 200, "train": None}

_ANSWER_PHRASE = "The answer is"


@dataclass(frozen=True)
class Op:
    """One operation of a problem: ``symbol`` in ``+ - * /`` applied with ``operand``."""

    symbol: str
    operand: int

    def __post_init__(self) -> None:
        if self.symbol not in OPS:
            raise ValueError(f"symbol must be one of {sorted(OPS)}, got {self.symbol!r}")


@dataclass(frozen=True)
class ProblemConfig:
    """Difficulty of generated problems.

    Attributes:
        min_ops / max_ops: number of operations (= solution steps), drawn uniformly in between.
        max_value: every intermediate value stays in ``[1, max_value]``.
        max_start: the start value is drawn from ``[1, max_start]``.
        max_addend: add/subtract operands are drawn from ``[1, max_addend]``.
        min_factor / max_factor: multiply/divide operands are drawn from this range.
    """

    min_ops: int = 3
    max_ops: int = 8
    max_value: int = 99
    max_start: int = 50
    max_addend: int = 20
    min_factor: int = 2
    max_factor: int = 9

    def __post_init__(self) -> None:
        if self.min_ops < 1:
            raise ValueError(f"min_ops must be >= 1, got {self.min_ops}")
        if self.max_ops < self.min_ops:
            raise ValueError(f"max_ops must be >= min_ops ({self.min_ops}), got {self.max_ops}")
        if self.max_value < 2:
            raise ValueError(f"max_value must be >= 2, got {self.max_value}")
        if not 1 <= self.max_start <= self.max_value:
            raise ValueError(f"max_start must be in [1, max_value], got {self.max_start}")
        if self.max_addend < 1:
            raise ValueError(f"max_addend must be >= 1, got {self.max_addend}")
        if self.min_factor < 2:
            raise ValueError(f"min_factor must be >= 2, got {self.min_factor}")
        if self.max_factor < self.min_factor:
            raise ValueError(f"max_factor must be >= min_factor ({self.min_factor}), got {self.max_factor}")


@dataclass(frozen=True)
class ArithProblem:
    """One problem: its question, the gold answer, the operations and the gold steps.

    ``start`` is the value the chain of ``ops`` starts from (it is also the first number in the
    question).
    """

    id: str
    question: str
    answer: int
    ops: tuple[Op, ...]
    gold_steps: tuple[str, ...]
    start: int


def apply_op(value: int, op: Op) -> int | None:
    """The exact result of ``value op.symbol op.operand``; None for an inexact division."""
    if op.symbol == "+":
        return value + op.operand
    if op.symbol == "-":
        return value - op.operand
    if op.symbol == "*":
        return value * op.operand
    if op.operand == 0 or value % op.operand:
        return None
    return value // op.operand


def format_step(value: int, op: Op, result: int, final: bool) -> str:
    """The gold text of one step, e.g. ``"17 * 3 = 51"``; the final one appends the boxed answer."""
    text = f"{value} {op.symbol} {op.operand} = {result}"
    if final:
        text += f". {_ANSWER_PHRASE} \\boxed{{{result}}}"
    return text


def format_question(start: int, ops: tuple[Op, ...]) -> str:
    """The question text: one short sentence per operation."""
    parts = [f"Start with {start}."]
    parts += [f"{OPS[op.symbol]} {op.operand}." for op in ops]
    parts.append("What is the result?")
    return " ".join(parts)


def solution_text(steps: tuple[str, ...] | list[str]) -> str:
    """Steps joined by the step delimiter ``"\\n\\n"``."""
    return "\n\n".join(steps)


def _candidate_ops(value: int, cfg: ProblemConfig) -> dict[str, list[int]]:
    """For each symbol, the operands that keep the result in ``[1, max_value]`` (exactly)."""
    factors = range(cfg.min_factor, cfg.max_factor + 1)
    cands = {
        "+": [a for a in range(1, cfg.max_addend + 1) if value + a <= cfg.max_value],
        "-": [a for a in range(1, cfg.max_addend + 1) if value - a >= 1],
        "*": [m for m in factors if value * m <= cfg.max_value],
        "/": [d for d in factors if value % d == 0 and value // d >= 1],
    }
    return {sym: operands for sym, operands in cands.items() if operands}


def generate_problem(rng: random.Random, cfg: ProblemConfig, problem_id: str) -> ArithProblem:
    """Draw one problem: a start value, then each op type uniformly among the feasible ones."""
    n_ops = rng.randint(cfg.min_ops, cfg.max_ops)
    start = rng.randint(1, cfg.max_start)
    value = start
    ops: list[Op] = []
    steps: list[str] = []
    for i in range(n_ops):
        cands = _candidate_ops(value, cfg)
        symbol = rng.choice(sorted(cands))
        op = Op(symbol, rng.choice(cands[symbol]))
        result = apply_op(value, op)
        assert result is not None  # candidates are exact by construction
        steps.append(format_step(value, op, result, final=i == n_ops - 1))
        ops.append(op)
        value = result
    ops_t = tuple(ops)
    return ArithProblem(
        id=problem_id,
        question=format_question(start, ops_t),
        answer=value,
        ops=ops_t,
        gold_steps=tuple(steps),
        start=start,
    )


def _split_seed(split: str, cfg: ProblemConfig) -> int:
    """A seed stable across Python versions, distinct per split and per config."""
    key = f"prmsearch.arith/{split}/{cfg!r}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little")


def _check_split(split: str) -> None:
    if split not in SPLIT_SIZES:
        raise ValueError(f"split must be one of {sorted(SPLIT_SIZES)}, got {split!r}")


def _stream(split: str, cfg: ProblemConfig, exclude: frozenset[str]) -> Iterator[ArithProblem]:
    """Problems of ``split`` in a fixed order, skipping excluded and already-seen questions."""
    rng = random.Random(_split_seed(split, cfg))
    seen: set[str] = set()
    index = 0
    while True:
        problem = generate_problem(rng, cfg, f"{split}-{index:05d}")
        if problem.question in exclude or problem.question in seen:
            continue
        if split != "train":  # the train stream is unbounded; duplicates there are harmless
            seen.add(problem.question)
        yield problem
        index += 1


@cache
def _fixed_split(split: str, cfg: ProblemConfig) -> tuple[ArithProblem, ...]:
    """The full ``test`` or ``validation`` split (cached)."""
    size = SPLIT_SIZES[split]
    assert size is not None
    exclude = frozenset() if split == "test" else _questions("test", cfg)
    stream = _stream(split, cfg, exclude)
    return tuple(next(stream) for _ in range(size))


@cache
def _questions(split: str, cfg: ProblemConfig) -> frozenset[str]:
    return frozenset(p.question for p in _fixed_split(split, cfg))


def iter_split(split: str, cfg: ProblemConfig | None = None) -> Iterator[ArithProblem]:
    """All problems of ``split`` in order; for ``train`` an endless stream."""
    _check_split(split)
    cfg = cfg or ProblemConfig()
    if split != "train":
        yield from _fixed_split(split, cfg)
        return
    exclude = _questions("test", cfg) | _questions("validation", cfg)
    yield from _stream("train", cfg, exclude)


def load_split(split: str, n: int | None = None, cfg: ProblemConfig | None = None) -> list[ArithProblem]:
    """The first ``n`` problems of ``split`` (all of a fixed split when ``n`` is None).

    Splits are disjoint by question text. ``n`` is required for ``train`` and may not exceed the
    fixed size of ``test`` / ``validation``.
    """
    _check_split(split)
    size = SPLIT_SIZES[split]
    if n is None:
        if size is None:
            raise ValueError("n must be given for the unbounded 'train' split, got None")
        n = size
    if n < 0 or (size is not None and n > size):
        raise ValueError(f"n must be in [0, {size if size is not None else 'inf'}], got {n}")
    stream = iter_split(split, cfg)
    return [next(stream) for _ in range(n)]
