"""Grading: is a model's final answer equivalent to the gold answer?

Design, in three layers, cheapest first. Each layer lives in its own module; this one holds the
public API (:func:`is_equivalent`, :func:`grade`, :func:`search_matcher`, :func:`gsm8k_gold`) and
the glue that combines the layers: the length limits, the verdict cache and the switch from
layer 2 to layer 3.

1. **Fast path, in process, no sympy** (:mod:`prmsearch.benchmarks.grading.answer_forms`). Both answers
   are cleaned (``$``, ``\\$``, ``\\text{}``, ``\\left``/``\\right``, spacing commands,
   ``^\\circ``, a leading ``x=``, ``\\dfrac``) and then decided without a symbolic checker when
   their shape allows it: equal strings or canonical forms
   (:func:`prmsearch.answers.canonical_answer`); two plain numbers (thousands commas, scientific
   notation, simple fractions, a trailing unit word such as ``5 km`` or ``1,000 dollars``, a
   multiplier word such as ``5 thousand``, a percent sign); lists, sets, tuples and intervals
   whose items are decided here; two multiple-choice letters (``(C)`` and ``C``); two plain
   words (``\\text{Evelyn}`` and ``Evelyn``). Most GSM8K/AIME/AMC comparisons and most votes end
   here and never start a process. Every step is linear in the answers' length.
2. **math-verify, in a worker process, with a time limit**
   (:mod:`prmsearch.benchmarks.grading.verifier_pool`). Everything else (radicals, pi forms, unions,
   matrices, expressions, collections with such items) goes to ``math_verify.parse``/``verify``.
   Their own timeouts use ``signal.alarm``, which works only in the main thread, so they are
   switched off (``parsing_timeout=None``, ``timeout_seconds=None``) and the limit is enforced
   from outside: a small reusable pool of worker processes
   (:class:`~prmsearch.benchmarks.grading.verifier_pool.VerifierPool`) answers over pipes, the caller
   waits at most ``timeout_s`` seconds, and a worker that overruns is killed and replaced. The
   workers are plain ``python -c`` subprocesses rather than ``multiprocessing`` children, so they
   never re-import the caller's ``__main__`` and can be started from threads and from daemonic
   pool workers alike. Adversarial LaTeX (``2^{2^{2^{\\dots}}}``) therefore costs at most
   ``timeout_s`` seconds and a worker restart, and :func:`is_equivalent` is safe to call from
   threads and worker processes. Workers start lazily, so a run whose answers all take the fast
   path never starts one; verdicts are cached per (pred, gold), in this module.
3. **Fallback, in process** (also :mod:`prmsearch.benchmarks.grading.verifier_pool`). Where no worker can
   start (no subprocesses allowed, no ``select`` on pipes), math-verify runs inline: with its own
   ``signal.alarm`` limit in the main thread; elsewhere no limit can be enforced (a thread cannot
   be stopped), so only answers that look cheap (short, no nested powers, factorials, sums or
   integrals) are compared, the rest count as not equivalent, with a logged warning. The time
   guarantee holds where workers can start.

Limits: an answer longer than :data:`MAX_ANSWER_CHARS` only equals an identical answer; one
longer than :data:`MAX_SYMBOLIC_CHARS` never goes to math-verify. No input makes
:func:`is_equivalent` raise: any unexpected error is logged and counts as "not equivalent".

Decisions on equivalence (each has a row in ``tests/benchmarks/test_grading.py`` or
``tests/benchmarks/test_grading_mathverify_cases.py``):

- **Integers and exact decimals compare exactly**, as rationals of any length: ``1000001`` is not
  ``1000000`` and ``0.30000001`` is not ``0.3``; ``0.5`` is ``\\frac{1}{2}`` (a fraction with a
  terminating decimal is an exact decimal).
- **Approximation** (the only tolerance): a decimal written with ``k`` digits after its point
  *approximates* a value ``v`` when ``|decimal - v| <= 10^-k`` (one unit in its last written
  place: rounded or truncated there) and it has at least :data:`APPROX_MIN_DIGITS` (6)
  significant digits. It is used only where exact comparison cannot apply: ``v`` has no exact
  decimal (a fraction such as ``1/3``: ``0.3333333`` matches it, ``0.333`` does not; an
  irrational such as ``\\sqrt{2}`` or ``\\pi``, evaluated in the math-verify worker:
  ``3.14159265`` matches ``\\pi``, ``3.14`` does not), or the decimal is explicitly approximate
  (``\\approx``, ``≈``, "approximately", "about", a trailing ``\\dots``). A gold answer that is
  explicitly approximate sets the precision itself (no minimum digit count). Inside expressions
  that only math-verify reads, floats are rounded to :data:`FLOAT_PLACES` places (math-verify's
  default of 6 would accept ``0.3000001`` for ``0.3``).
- **Words after a number.** Unit words are dropped when separated from the number (``5 km``,
  ``10\\text{ cm}^2``, ``12 dollars``, ``45 degrees``) or when a known unit (``5cm``): ``5x`` is
  an expression, not ``5`` with a unit; math words (``pi``, ``sqrt``, ``i``...) are never units.
  Words that change the value are never dropped: multipliers are applied (``5 thousand`` is
  5000, ``2.5 million``, ``3 hundred``, ``5 dozen``, ``3 tenths``...); other value-changing words
  (``squared``, ``cubed``, ``grand``, ``k``, ``bn``, ``lakh``...) make the answer "not a plain
  number", so it never equals the bare number.
- A percentage matches both its fraction and its bare number: ``50\\%`` equals ``0.5`` and ``50``.
  Gold answers and models write percentages both ways ("what percent ...?" answered ``50``),
  and the two readings never collide for a wrong answer that is not off by exactly 100x.
- **Commas.** A comma followed by a space separates list items (``32, 349`` is two numbers,
  never 32349). Without a space, commas between groups of exactly three digits are thousands
  separators (``1,000``, ``12,345,678``). A single comma with other than three digits after it
  (``1000,99``, ``3,5``) is a decimal comma when the other answer is a single number and a list
  separator otherwise (``3,5`` equals ``3.5`` and ``\\{3,5\\}``). Inside brackets every comma
  separates items (``(2,100)`` is a pair).
- **Lists, sets, tuples** compare as the gold's form says. ``\\{...\\}`` is a set and a bare
  comma list (as several boxed answers are extracted) is a list of solutions: both compare
  without order, item by item. A bracketed tuple or interval keeps its order and its brackets
  (``(1,2]`` differs from ``(1,2)``, ``(1,2)`` from ``(2,1)``); a bare list against a tuple gold
  is read in order. A single value against a set or list is a one-item list. Items are compared
  with these same rules, so ``(2, 2), (6, 2)`` equals ``(6, 2), (2, 2)``.
- ``3.14`` is not ``\\pi`` (too few digits for an approximation of an irrational).
- Text answers compare case-insensitively (``\\text{East}`` equals ``east``), single letters
  case-sensitively (variables), multiple-choice letters with or without parentheses.

Votes (:func:`search_matcher`) use the same comparison in a *strict* mode that is an
equivalence relation, so grouping answers never depends on the order they arrive in: no
approximation, one reading per answer (a percentage is its bare number, a comma without a
space is never a decimal comma), and a bare list is a set, never a tuple.
"""

from __future__ import annotations

import logging
from functools import lru_cache

from prmsearch.answers import AnswerMatcher, extract_answer
from prmsearch.benchmarks.grading.answer_forms import (
    APPROX_MIN_DIGITS,
    _in_gold_form,
    _quick_verdict,
    clean_answer,
)
from prmsearch.benchmarks.grading.answer_forms import MAX_ITEMS as MAX_ITEMS
from prmsearch.benchmarks.grading.verifier_pool import (
    DEFAULT_TIMEOUT_S,
    VerifierPool,
    _default_pool,
    _inline_equal,
    math_verify_equal,
    shutdown_verifier,
)
from prmsearch.benchmarks.grading.verifier_pool import FLOAT_PLACES as FLOAT_PLACES
from prmsearch.benchmarks.grading.verifier_pool import serve_stdio as serve_stdio

# The layers' names are imported from here too: those in ``__all__`` and, re-exported with
# ``name as name``, ``MAX_ITEMS``, ``FLOAT_PLACES`` and ``serve_stdio`` (the old worker command).
__all__ = [
    "APPROX_MIN_DIGITS",
    "DEFAULT_TIMEOUT_S",
    "VerifierPool",
    "clean_answer",
    "extract_answer",
    "grade",
    "gsm8k_gold",
    "is_equivalent",
    "math_verify_equal",
    "search_matcher",
    "shutdown_verifier",
]

log = logging.getLogger(__name__)

#: Longer answers equal only an identical answer (keeps every step cheap on odd input).
MAX_ANSWER_CHARS = 20_000
#: Longer answers are never sent to math-verify.
MAX_SYMBOLIC_CHARS = 4_000

# ---------------------------------------------------------------------------------------------
# GSM8K gold
# ---------------------------------------------------------------------------------------------


def gsm8k_gold(answer_field: str) -> str:
    """The gold number of a GSM8K ``answer`` field: the text after ``####``, commas removed."""
    if not isinstance(answer_field, str) or "####" not in answer_field:
        raise ValueError(f"a GSM8K answer must contain '#### <number>', got {answer_field!r:.80}")
    gold = answer_field.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold:
        raise ValueError(f"a GSM8K answer has nothing after '####': {answer_field!r:.80}")
    return gold


# ---------------------------------------------------------------------------------------------
# Combining the layers: math-verify's verdicts, cached, from the pool or else inline
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _symbolic_equal(pred: str, gold: str, timeout_s: float, strict: bool = False) -> bool:
    try:
        verdict = _default_pool().equal(pred, gold, timeout_s, strict)
    except (RuntimeError, OSError) as exc:
        log.debug("math-verify worker unavailable (%s); running inline", exc)
        return _inline_equal(pred, gold, timeout_s, strict)
    return bool(verdict)


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _check_timeout(timeout_s: float) -> None:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")


def _equivalent(pred: object, gold: object, timeout_s: float, strict: bool) -> bool:
    """:func:`is_equivalent`, or its strict form for votes; never raises."""
    if not isinstance(pred, str) or not isinstance(gold, str):
        return False
    pred, gold = pred.strip(), gold.strip()
    if not pred or not gold:
        return False
    if pred == gold:
        return True
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    try:
        verdict = _quick_verdict(pred, gold, strict)
        if verdict is not None:
            return verdict
        if len(pred) > MAX_SYMBOLIC_CHARS or len(gold) > MAX_SYMBOLIC_CHARS:
            return False
        if strict and pred > gold:  # one cache entry and one verdict per unordered pair
            pred, gold = gold, pred
        return _symbolic_equal(_in_gold_form(pred, gold), gold, float(timeout_s), strict)
    except Exception as exc:  # a bug here must cost a verdict, never a benchmark run
        log.warning("grading %.60r against %.60r failed (%r); counted as not equivalent", pred, gold, exc)
        return False


def is_equivalent(pred: str | None, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether answer ``pred`` means the same as ``gold`` (see the module docstring for the rules).

    Never raises on odd input and never takes much more than ``timeout_s`` seconds (plus a
    one-off worker start); a comparison that overruns counts as not equivalent.
    """
    _check_timeout(timeout_s)
    return _equivalent(pred, gold, timeout_s, strict=False)


def grade(response_text: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether a full response's final answer (:func:`extract_answer`) is ``gold``."""
    return is_equivalent(extract_answer(response_text or ""), gold, timeout_s=timeout_s)


def search_matcher(timeout_s: float = DEFAULT_TIMEOUT_S) -> AnswerMatcher:
    """An :class:`AnswerMatcher` whose votes use the grader's equivalence, so search and grading agree.

    Votes use the strict form (module docstring, last paragraph): an equivalence relation, so
    grouping answers as they arrive gives the same groups in any order.
    """
    _check_timeout(timeout_s)

    def equivalent(a: str, b: str) -> bool:
        return _equivalent(a, b, timeout_s, strict=True)

    return AnswerMatcher(equivalent=equivalent)
