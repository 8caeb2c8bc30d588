"""Grading: is a model's final answer equivalent to the gold answer?

Design, in three layers, cheapest first:

1. **Fast path, in process, no sympy.** Both answers are cleaned (``$``, ``\\$``, ``\\text{}``,
   ``\\left``/``\\right``, spacing commands, ``^\\circ``, a leading ``x=``, ``\\dfrac``) and then
   decided without a symbolic checker when their shape allows it: equal strings or canonical forms
   (:func:`prmsearch.answers.canonical_answer`); two plain numbers (thousands commas, scientific
   notation, simple fractions, a trailing unit word such as ``5 km`` or ``1,000 dollars``, a
   multiplier word such as ``5 thousand``, a percent sign); lists, sets, tuples and intervals
   whose items are decided here; two multiple-choice letters (``(C)`` and ``C``); two plain
   words (``\\text{Evelyn}`` and ``Evelyn``). Most GSM8K/AIME/AMC comparisons and most votes end
   here and never start a process. Every step is linear in the answers' length.
2. **math-verify, in a worker process, with a time limit.** Everything else (radicals, pi forms,
   unions, matrices, expressions, collections with such items) goes to
   ``math_verify.parse``/``verify``. Their own timeouts use ``signal.alarm``, which works only in
   the main thread, so they are switched off (``parsing_timeout=None``, ``timeout_seconds=None``)
   and the limit is enforced from outside: a small reusable pool of worker processes
   (:class:`VerifierPool`) answers over pipes, the caller waits at most ``timeout_s`` seconds, and
   a worker that overruns is killed and replaced. The workers are plain ``python -c`` subprocesses
   rather than ``multiprocessing`` children, so they never re-import the caller's ``__main__`` and
   can be started from threads and from daemonic pool workers alike. Adversarial LaTeX
   (``2^{2^{2^{\\dots}}}``) therefore costs at most ``timeout_s`` seconds and a worker restart, and
   :func:`is_equivalent` is safe to call from threads and worker processes. Workers start lazily,
   so a run whose answers all take the fast path never starts one; verdicts are cached per
   (pred, gold).
3. **Fallback, in process.** Where no worker can start (no subprocesses allowed, no ``select``
   on pipes), math-verify runs inline: with its own ``signal.alarm`` limit in the main thread;
   elsewhere no limit can be enforced (a thread cannot be stopped), so only answers that look
   cheap (short, no nested powers, factorials, sums or integrals) are compared, the rest count as
   not equivalent, with a logged warning. The time guarantee holds where workers can start.

Limits: an answer longer than :data:`MAX_ANSWER_CHARS` only equals an identical answer; one
longer than :data:`MAX_SYMBOLIC_CHARS` never goes to math-verify. No input makes
:func:`is_equivalent` raise: any unexpected error is logged and counts as "not equivalent".

Decisions on equivalence (each has a row in ``tests/test_grading.py`` or
``tests/test_grading_mathverify_cases.py``):

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

import atexit
import contextlib
import json
import logging
import math
import os
import queue
import re
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TypeVar

from prmsearch.answers import AnswerMatcher, brace_pairs, canonical_answer, extract_answer, int_from_digits

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
_T = TypeVar("_T")

#: Folder holding the ``prmsearch`` package, put on the workers' PYTHONPATH.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Seconds one math-verify comparison may take before it counts as "not equivalent".
DEFAULT_TIMEOUT_S = 5.0
#: Significant digits a decimal needs before it may stand for a value it only approximates.
APPROX_MIN_DIGITS = 6
#: Decimal places math-verify rounds floats to inside expressions (its own default is 6).
FLOAT_PLACES = 12
#: Longer answers equal only an identical answer (keeps every step cheap on odd input).
MAX_ANSWER_CHARS = 20_000
#: Longer answers are never sent to math-verify.
MAX_SYMBOLIC_CHARS = 4_000
#: Collections with more items are left to math-verify (item matching is quadratic).
MAX_ITEMS = 64
#: Deeper nesting of collections is left to math-verify.
_MAX_NESTING = 8
#: Exponents past this size are not turned into exact fractions.
_MAX_EXPONENT = 400

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
# Cleaning
# ---------------------------------------------------------------------------------------------

_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox|mathbf)\{")
_DROP_TOKENS = (
    "\\displaystyle", "\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "~",
    "^{\\circ}", "^\\circ", "°", "\\$", "$",
)  # fmt: skip
#: LaTeX's thousands separator (``10,\\!000``, ``32,\\! 349``, ``1{,}000``): never a list comma.
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:,\\!|\{,\}(?:\\!)?)\s*(?=\d{3}(?!\d))")
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?P<rhs>[^=]+)$")


def _unwrap_text(s: str) -> str:
    """Replace ``\\text{...}``-style wrappers by their content, padded with spaces (one pass)."""
    if "\\" not in s:
        return s
    pairs = brace_pairs(s)
    cuts: dict[int, int] = {}  # start of a piece to replace by a space -> its end
    for match in _TEXT_COMMAND.finditer(s):
        close = pairs.get(match.end() - 1)
        if close is not None:
            cuts[match.start()] = match.end()
            cuts[close] = close + 1
    if not cuts:
        return s
    out, done = [], 0
    for start in sorted(cuts):
        if start >= done:
            out += [s[done:start], " "]
            done = cuts[start]
    out.append(s[done:])
    return "".join(out)


def clean_answer(answer: str) -> str:
    """Strip presentation that never changes an answer's value (see the module docstring)."""
    s = _unwrap_text(answer.strip())
    s = _LATEX_THOUSANDS.sub(",", s)  # ",\\!" groups thousands in LaTeX, whatever space follows
    for token in _DROP_TOKENS:
        s = s.replace(token, " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\s+(?=[\^}])", "", s)
    s = s.rstrip(".").strip()
    assignment = _ASSIGNMENT.match(s)
    if assignment:
        s = assignment.group("rhs").strip()
    return s


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

# Every repetition below is unambiguous (no two ways to split a run of digits), so matching is
# linear even on a 20,000-digit number.
_NUMBER = (
    r"(?P<sign>[+-]?)\s*"
    r"(?:(?P<frac>\\frac\{(?P<fn>\d+)\}\{(?P<fd>\d+)\}|\\frac(?P<sn>\d)(?P<sd>\d))"
    r"|(?P<ratio>(?P<rn>\d+)/(?P<rd>\d+))"
    r"|(?:(?P<grouped>\d{1,3}(?:,\d{3})+)(?:\.(?P<gfrac>\d+))?|(?P<int>\d+)(?:\.(?P<ifrac>\d*))?"
    r"|\.(?P<lfrac>\d+))"
    r"(?:[eE](?P<exp>[+-]?\d+)|\s*(?:\\times|\\cdot)\s*10\^\{?(?P<texexp>[+-]?\d+)\}?)?)"
)
_PERCENT = r"(?P<percent>\s*(?:\\?%|percent\b|per\s?cent\b))?"
_UNIT = r"(?:(?P<gap>\s*)(?P<unit>[A-Za-z]+(?:\s+[A-Za-z]+)*)(?:\^\{?\d\}?)?)?"
_NUMERIC = re.compile(rf"{_NUMBER}{_PERCENT}{_UNIT}")
#: A leading approximation mark (``x \approx``, ``≈``, "about") or a trailing ``\dots``.
_APPROX = re.compile(
    r"(?:[A-Za-z](?:_\{?\w+\}?)?\s*)?(?:\\approx|≈|\\simeq|(?i:approximately|approx\.?|about|around|roughly))"
    r"\s*(?P<lead>.+)"
    r"|(?P<trail>.+?)\s*(?:\\l?dots|\\cdots|…)"
)
#: Words that are mathematics, never a unit: "2 pi" is not 2.
_MATH_WORDS = frozenset({
    "pi", "e", "i", "sqrt", "inf", "infty", "infinity", "ln", "log", "exp", "sin", "cos", "tan", "sec",
    "csc", "cot", "arcsin", "arccos", "arctan", "mod", "and", "or", "x", "y", "z", "n", "k",
})  # fmt: skip
#: Words that multiply the number before them: "5 thousand" is 5000, never 5.
_MULTIPLIERS: dict[str, Fraction] = {
    **{w: Fraction(100) for w in ("hundred", "hundreds")},
    **{w: Fraction(10**3) for w in ("thousand", "thousands")},
    **{w: Fraction(10**6) for w in ("million", "millions")},
    **{w: Fraction(10**9) for w in ("billion", "billions")},
    **{w: Fraction(10**12) for w in ("trillion", "trillions")},
    **{w: Fraction(12) for w in ("dozen", "dozens")},
    **{w: Fraction(1, 2) for w in ("half", "halves")},
    **{w: Fraction(1, 3) for w in ("third", "thirds")},
    **{w: Fraction(1, 4) for w in ("fourth", "fourths")},
    **{w: Fraction(1, 10) for w in ("tenth", "tenths")},
    **{w: Fraction(1, 100) for w in ("hundredth", "hundredths")},
    **{w: Fraction(1, 1000) for w in ("thousandth", "thousandths")},
    **{w: Fraction(1, 10**6) for w in ("millionth", "millionths")},
}
#: Words that change the value in a way not applied here: the answer is then no plain number.
#: ("square units", "more apples", "times" stay units: they name what is counted.)
_VALUE_WORDS = frozenset({
    "squared", "cubed", "power", "factorial", "inverse", "reciprocal", "grand", "k", "mil", "mn",
    "bn", "thou", "lakh", "lakhs", "crore", "crores", "gross", "score", "quarter", "quarters",
    "percent", "percentage", "cent", "permille", "ppm", "ppb", "negative", "minus", "plus", "over",
})  # fmt: skip
#: Units recognised when written without a space ("5cm", as canonical forms and votes spell it).
_ATTACHED_UNITS = frozenset({
    "mm", "cm", "km", "m", "in", "ft", "yd", "mi", "mg", "g", "kg", "lb", "lbs", "oz", "ml", "mL", "L",
    "s", "sec", "min", "h", "hr", "hrs", "mph", "cents", "dollars", "degrees",
})  # fmt: skip
#: Single-letter unit symbols accepted after a number (other single letters are variables;
#: ``K`` is left out: ``5K`` is more often 5,000 than 5 kelvin).
_SINGLE_LETTER_UNITS = frozenset({"m", "g", "s", "h", "L", "J", "W", "V", "N"})


@dataclass(frozen=True)
class _Number:
    """A parsed plain number.

    ``ulp`` is one unit in its last written decimal place (``0.125`` -> 0.001), None for a
    fraction; ``digits`` counts its significant digits; ``approx`` says it was marked approximate.
    """

    value: Fraction
    percent: bool = False
    approx: bool = False
    ulp: Fraction | None = None
    digits: int = 0

    def readings(self, strict: bool) -> tuple[tuple[Fraction, Fraction | None], ...]:
        """(value, ulp) per meaning: ``50%`` means 0.5 or 50, only 50 when ``strict``."""
        bare = (self.value, self.ulp)
        if not self.percent or strict:
            return (bare,)
        return ((self.value / 100, None if self.ulp is None else self.ulp / 100), bare)


def _number_core(m: re.Match[str]) -> tuple[Fraction, Fraction | None, int] | None:
    """(value, ulp, significant digits) of the number matched by :data:`_NUMBER`, unsigned."""
    if m.group("frac") is not None:
        num, den = m.group("fn") or m.group("sn"), m.group("fd") or m.group("sd")
        return _ratio(num, den)
    if m.group("ratio") is not None:
        return _ratio(m.group("rn"), m.group("rd"))
    if m.group("grouped") is not None:
        whole, frac = m.group("grouped").replace(",", ""), m.group("gfrac") or ""
    elif m.group("int") is not None:
        whole, frac = m.group("int"), m.group("ifrac") or ""
    else:
        whole, frac = "", m.group("lfrac")
    value = Fraction(int_from_digits(whole + frac), 10 ** len(frac))
    ulp = Fraction(1, 10 ** len(frac))
    exponent = m.group("exp") or m.group("texexp")
    if exponent is not None:
        if len(exponent) > 6 or abs(int(exponent)) > _MAX_EXPONENT:
            return None
        scale = Fraction(10) ** int(exponent)
        value, ulp = value * scale, ulp * scale
    return value, ulp, len((whole + frac).lstrip("0"))


def _ratio(num: str, den: str) -> tuple[Fraction, None, int] | None:
    denominator = int_from_digits(den)
    return None if denominator == 0 else (Fraction(int_from_digits(num), denominator), None, 0)


def _multiplier(gap: str, unit: str | None) -> Fraction | None:
    """What the words after a number multiply it by: 1 for units, None when not a plain number."""
    if unit is None:
        return Fraction(1)
    words = unit.split()
    lowered = [w.lower() for w in words]
    if any(w in _MATH_WORDS for w in lowered):
        return None
    if not gap:  # attached: "5cm", "5thousand", "5thousanddollars" (canonical forms drop spaces)
        return _attached_multiplier(words[0]) if len(words) == 1 else None
    factor = Fraction(1)
    leading = 0
    while leading < len(lowered) and lowered[leading] in _MULTIPLIERS:
        factor *= _MULTIPLIERS[lowered[leading]]
        leading += 1
    rest = lowered[leading:]
    if any(w in _MULTIPLIERS or w in _VALUE_WORDS for w in rest):
        return None
    if leading == 0 and len(words) == 1 and len(unit) == 1 and unit not in _SINGLE_LETTER_UNITS:
        return None
    return factor


def _attached_multiplier(word: str) -> Fraction | None:
    """A word written straight after the number: a known unit, or a multiplier (plus a unit)."""
    if word in _ATTACHED_UNITS:
        return Fraction(1)
    lowered = word.lower()
    for name, factor in _MULTIPLIERS.items():
        if lowered.startswith(name) and (lowered[len(name) :] in ("", *_ATTACHED_UNITS)):
            return factor
    return None


def _parse_number(s: str) -> _Number | None:
    """A plain number (approximation mark, percent, multiplier and unit words allowed), else None."""
    approx = _APPROX.fullmatch(s)
    if approx is not None:
        s = (approx.group("lead") or approx.group("trail")).strip()
    m = _NUMERIC.fullmatch(s)
    if m is None:
        parenthesised = re.fullmatch(r"\((.+)\)", s)  # "(073)", AIME solutions' \textbf{(073)}
        if parenthesised is None or "," in parenthesised.group(1):
            return None
        m = _NUMERIC.fullmatch(parenthesised.group(1).strip())
        if m is None:
            return None
    core = _number_core(m)
    factor = _multiplier(m.group("gap") or "", m.group("unit"))
    if core is None or factor is None:
        return None
    value, ulp, digits = core
    if m.group("sign") == "-":
        value = -value
    return _Number(
        value * factor,
        percent=m.group("percent") is not None,
        approx=approx is not None,
        ulp=None if ulp is None else ulp * factor,
        digits=digits,
    )


def _has_exact_decimal(value: Fraction) -> bool:
    """Whether ``value`` has a terminating decimal expansion (denominator 2^a 5^b)."""
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


def _approximates(
    number: _Number, value: Fraction, ulp: Fraction | None, target: Fraction, exact_target: bool, gold: bool
) -> bool:
    """Whether the decimal ``value`` (a reading of ``number``) stands for ``target``.

    ``exact_target`` says ``target`` has an exact decimal, so only an explicit approximation may
    stand for it; ``gold`` says ``number`` is the gold answer (whose own precision is trusted
    when it is marked approximate). See "Approximation" in the module docstring.
    """
    if ulp is None or (exact_target and not number.approx):
        return False
    if number.digits < APPROX_MIN_DIGITS and not (gold and number.approx):
        return False
    return abs(value - target) <= ulp


def _numbers_match(pred: _Number, gold: _Number, strict: bool = False) -> bool:
    """Exactly equal under some reading, or (not ``strict``) one approximates the other."""
    pairs = [(p, g) for p in pred.readings(strict) for g in gold.readings(strict)]
    if any(p[0] == g[0] for p, g in pairs):
        return True
    if strict:
        return False
    return any(
        _approximates(pred, p[0], p[1], g[0], _has_exact_decimal(g[0]), gold=False)
        or _approximates(gold, g[0], g[1], p[0], _has_exact_decimal(p[0]), gold=True)
        for p, g in pairs
    )


def _number_against_value(number: _Number, target: Fraction, exact: bool, gold: bool) -> bool:
    """``number`` against a real value math-verify computed (``exact`` False: irrational)."""
    for value, ulp in number.readings(strict=False):
        if exact and value == target:
            return True
        exact_target = exact and _has_exact_decimal(target)
        if _approximates(number, value, ulp, target, exact_target, gold):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Collections: lists, sets, tuples, intervals
# ---------------------------------------------------------------------------------------------

_OPENERS, _CLOSERS = "([{", ")]}"
_DECIMAL_COMMA = re.compile(r"(?P<a>[+-]?\d+),(?P<b>\d+)(?P<tail>[^,\d][^,]*)?")


@dataclass(frozen=True)
class _Collection:
    """Items separated by commas: a ``set`` (``\\{..\\}``), a bare ``list``, or a ``bracket``
    tuple or interval with its two bracket characters. ``decimal`` is the text read with its
    comma as a decimal point, when the comma is ambiguous (``1000,99``)."""

    kind: str
    items: tuple[str, ...]
    brackets: str = ""
    decimal: str | None = None


def _encloses(s: str) -> bool:
    """Whether the bracket opening ``s`` closes only at its very end."""
    depth = 0
    for i, ch in enumerate(s):
        if ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS:
            depth -= 1
            if depth <= 0:
                return i == len(s) - 1
    return False


def _split(s: str, top: bool) -> list[str] | None:
    """Items of ``s`` split at commas outside brackets; None if an item is empty.

    At the top level (``top``), digits either side of a comma with no space after it and
    exactly three digits after it are one number with a thousands separator (``1,000``).
    """
    items, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS:
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(s[start:i])
            start = i + 1
            if len(items) > MAX_ITEMS:
                return None
    items.append(s[start:])
    if top:
        items = _join_thousands(items)
    items = [item.strip() for item in items]
    return None if any(not item for item in items) else items


def _join_thousands(parts: list[str]) -> list[str]:
    joined = [parts[0]]
    for part in parts[1:]:
        if re.fullmatch(r"[+-]?\d{1,3}(?:,\d{3})*", joined[-1]) and re.match(r"\d{3}(?!\d)", part):
            joined[-1] += "," + part
        else:
            joined.append(part)
    return joined


def _read_collection(s: str) -> _Collection | None:
    """``s`` as a set (``\\{1\\}``, ``{1,2}``), tuple, interval or bare list (two items or more)."""
    if s.startswith("\\{") and s.endswith("\\}") and len(s) > 4 and _encloses(s[1:]):
        items = _split(s[2:-2], top=False)
        return None if items is None else _Collection("set", tuple(items))
    if len(s) > 2 and s[0] == "{" and s[-1] == "}" and _encloses(s):  # "{1,2}": a set, loosely
        items = _split(s[1:-1], top=False)
        return None if items is None or len(items) < 2 else _Collection("set", tuple(items))
    if len(s) > 2 and s[0] in "([" and s[-1] in ")]" and _encloses(s):
        items = _split(s[1:-1], top=False)
        if items is None or len(items) < 2:
            return None
        return _Collection("bracket", tuple(items), brackets=s[0] + s[-1])
    items = _split(s, top=True)
    if items is None or len(items) < 2:
        return None
    comma = _DECIMAL_COMMA.fullmatch(s)
    decimal = None
    if comma is not None and len(comma.group("b")) != 3:
        decimal = f"{comma.group('a')}.{comma.group('b')}{comma.group('tail') or ''}"
    return _Collection("list", tuple(items), decimal=decimal)


# ---------------------------------------------------------------------------------------------
# The fast path
# ---------------------------------------------------------------------------------------------

_CHOICE = re.compile(r"^\(?(?P<letter>[A-E])\)?$")
_WORDS = re.compile(r"^[A-Za-z][A-Za-z' -]*$")


def _choice(s: str) -> str | None:
    """The letter of a multiple-choice answer ``C``, ``(C)`` or ``(C) 12``, else None."""
    m = _CHOICE.match(s) or re.match(r"^\((?P<letter>[A-E])\)\s", s)
    return m.group("letter") if m else None


def _balanced(s: str) -> bool:
    """Whether every ``{`` is closed in order (escaped ``\\{``/``\\}`` excluded)."""
    depth = 0
    for ch in s.replace("\\{", "").replace("\\}", ""):
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return False
    return depth == 0


@dataclass(frozen=True)
class _Answer:
    """One answer, read once: its cleaned text, canonical form and what shape it has."""

    text: str
    canonical: str
    balanced: bool
    collection: _Collection | None
    number: _Number | None
    choice: str | None
    words: str | None

    @property
    def plain(self) -> bool:
        """Whether the fast path fully understands this answer (so "no match" is final)."""
        return self.number is not None or self.choice is not None or self.words is not None


def _read(answer: str) -> _Answer:
    """Clean ``answer`` and read its shape (short answers cached: votes compare them often)."""
    return _read_short(answer) if len(answer) <= 1000 else _read_fresh(answer)


@lru_cache(maxsize=4096)
def _read_short(answer: str) -> _Answer:
    return _read_fresh(answer)


def _read_fresh(answer: str) -> _Answer:
    text = clean_answer(answer)
    collection = _read_collection(text)
    words = None
    if collection is None and _WORDS.match(text):
        words = " ".join(text.split())
    return _Answer(
        text=text,
        canonical=canonical_answer(answer),
        balanced=_balanced(answer),
        collection=collection,
        number=None if collection is not None else _parse_number(text),
        choice=None if collection is not None else _choice(text),
        words=words,
    )


class _Budget:
    """Item comparisons one verdict may still make (nested collections multiply them)."""

    def __init__(self, comparisons: int = 20_000) -> None:
        self.left = comparisons

    def spend(self, comparisons: int) -> bool:
        """Take ``comparisons`` from the budget; False (and nothing taken) when it is short."""
        if comparisons > self.left:
            return False
        self.left -= comparisons
        return True


def _match(pred: _Answer, gold: _Answer, strict: bool, budget: _Budget, depth: int = 0) -> bool | None:
    """The fast verdict on two read answers; None means "ask math-verify"."""
    if pred.text == gold.text or pred.canonical == gold.canonical:
        return True
    if not pred.text or not gold.text:
        return False
    if depth > _MAX_NESTING:
        return None
    if pred.collection is not None or gold.collection is not None:
        return _match_collections(pred, gold, strict, budget, depth)
    if pred.number is not None and gold.number is not None:
        return _numbers_match(pred.number, gold.number, strict)
    if pred.choice is not None and gold.choice is not None:
        return pred.choice == gold.choice
    if pred.words is not None and gold.words is not None:
        if len(pred.words) == 1 or len(gold.words) == 1:
            return pred.words == gold.words
        return pred.words.lower() == gold.words.lower()
    return None


def _match_collections(
    pred: _Answer, gold: _Answer, strict: bool, budget: _Budget, depth: int
) -> bool | None:
    """Lists, sets, tuples and intervals, compared as the gold's form says (module docstring)."""
    cp, cg = pred.collection, gold.collection
    if not strict:  # an ambiguous comma against a single number is a decimal comma
        if cp is not None and cp.decimal is not None and gold.number is not None:
            reading = _parse_number(cp.decimal)
            return reading is not None and _numbers_match(reading, gold.number)
        if cg is not None and cg.decimal is not None and pred.number is not None:
            reading = _parse_number(cg.decimal)
            return reading is not None and _numbers_match(pred.number, reading)
    if cp is None or cg is None:  # a single value against a collection
        single, other = (pred, cg) if cp is None else (gold, cp)
        assert other is not None
        if other.kind == "bracket":
            return False if single.plain else None
        items = (single.text,)
        cp, cg = (_Collection("list", items), cg) if cp is None else (cp, _Collection("list", items))
        assert cp is not None and cg is not None
    order = _order(cp, cg, strict)
    if order is None or order is False:
        return order
    pred_items = [_read(item) for item in cp.items]
    gold_items = [_read(item) for item in cg.items]
    if len(pred_items) != len(gold_items):
        return False if all(i.plain or i.collection for i in pred_items + gold_items) else None
    if not budget.spend(len(pred_items) * (len(gold_items) if order == "unordered" else 1)):
        return None
    if order == "ordered":
        verdicts = [_match(p, g, strict, budget, depth + 1) for p, g in zip(pred_items, gold_items)]
        if False in verdicts:
            return False
        return True if all(verdicts) else None
    if order == "unordered":
        table = [[_match(p, g, strict, budget, depth + 1) for g in gold_items] for p in pred_items]
        if _perfect_matching([[v is True for v in row] for row in table]):
            return True
        return None if _perfect_matching([[v is not False for v in row] for row in table]) else False
    return None


def _order(pred: _Collection, gold: _Collection, strict: bool) -> str | bool | None:
    """How two collections compare: "ordered", "unordered", False (never equal), None (ask)."""
    kinds = {pred.kind, gold.kind}
    if kinds <= {"set", "list"}:
        return "unordered"
    if pred.kind == gold.kind == "bracket":
        return "ordered" if pred.brackets == gold.brackets else False
    if strict:
        return False  # a tuple is never a set or a bare list: keeps votes transitive
    if pred.kind == "list" and gold.kind == "bracket":
        return "ordered"  # several boxed values against a tuple gold: in order
    return None


def _perfect_matching(allowed: list[list[bool]]) -> bool:
    """Whether every row can be paired with its own column through allowed cells (Kuhn)."""
    size = len(allowed)
    owner = [-1] * size

    def claim(row: int, seen: list[bool]) -> bool:
        for col in range(size):
            if allowed[row][col] and not seen[col]:
                seen[col] = True
                if owner[col] == -1 or claim(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(claim(row, [False] * size) for row in range(size))


def _quick_verdict(pred: str, gold: str, strict: bool = False) -> bool | None:
    """Decide cheaply when the answers' shapes allow it; None means "ask math-verify"."""
    if pred == gold:
        return True
    p, g = _read(pred), _read(gold)
    if not p.text:
        return False
    if p.text == g.text or p.canonical == g.canonical:
        return True
    if not p.balanced or (strict and not g.balanced):
        return False  # malformed LaTeX; math-verify would silently close it (inside our \\boxed{})
    return _match(p, g, strict, _Budget())


def _in_gold_form(pred: str, gold: str) -> str:
    """A bare list ``pred`` wrapped in the gold's set braces or brackets, for math-verify."""
    p, g = _read(pred), _read(gold)
    if p.collection is None or p.collection.kind != "list" or g.collection is None:
        return pred
    if g.collection.kind == "set":
        return "\\{" + pred + "\\}"
    if g.collection.kind == "bracket":
        return g.collection.brackets[0] + pred + g.collection.brackets[1]
    return pred


# math-verify (runs in a worker process or, as a fallback, inline)
# ---------------------------------------------------------------------------------------------


def _quiet_math_verify() -> None:
    """Silence math-verify's "timeout is disabled" warning: we enforce the limit ourselves."""
    for name in ("math_verify", "math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _as_latex(answer: str) -> str:
    return "\\boxed{" + answer + "}"


def math_verify_equal(pred: str, gold: str, *, timeout_s: int | None = None) -> bool:
    """math-verify's verdict under this module's rules, in this process.

    ``timeout_s`` uses math-verify's ``signal.alarm`` limit: pass None (no limit) anywhere but the
    main thread.
    """
    return _symbolic_verdict(pred, gold, timeout_s, strict=False)


def _symbolic_verdict(pred: str, gold: str, timeout_s: int | None, strict: bool) -> bool:
    """Parse both answers with math-verify; a decimal against a real number follows our
    approximation rule (not ``strict``), everything else math-verify's ``verify`` with floats
    rounded to :data:`FLOAT_PLACES` places."""
    from math_verify import parse, verify

    _quiet_math_verify()
    gold_parsed = parse(_as_latex(gold), parsing_timeout=timeout_s)
    pred_parsed = parse(_as_latex(pred), parsing_timeout=timeout_s)
    if not gold_parsed or not pred_parsed:
        return False
    if not strict:
        verdict = _decimal_against_expression(pred, gold, pred_parsed[0], gold_parsed[0])
        if verdict is not None:
            return verdict
    return bool(verify(gold_parsed, pred_parsed, float_rounding=FLOAT_PLACES, timeout_seconds=timeout_s))


def _real_value(expr: object) -> tuple[Fraction, bool] | None:
    """(value, exact) of a sympy expression that is a real number written without floats.

    Rationals are exact; other reals (``\\sqrt{2}``, ``\\pi``) come as 60-digit approximations
    with ``exact`` False. None for anything else (symbols, complex numbers, sets, floats).
    """
    import sympy

    if not isinstance(expr, sympy.Expr) or expr.free_symbols or not expr.is_number:
        return None
    if expr.atoms(sympy.Float):
        return None
    if expr.is_rational:
        evaluated = expr.doit()  # math-verify parses unevaluated: sqrt(4)/6 is not yet 1/3
        if not evaluated.is_Rational:
            return None
        return Fraction(int(evaluated.p), int(evaluated.q)), True
    if expr.is_rational is not False or expr.is_real is not True or expr.is_finite is not True:
        return None
    approximation = sympy.N(expr, 60)
    if not approximation.is_Float:
        return None
    return Fraction(str(approximation)), False


def _decimal_against_expression(pred: str, gold: str, pred_expr: object, gold_expr: object) -> bool | None:
    """The verdict when one answer is a plain number and the other an exact real expression."""
    for text, other, is_gold in ((pred, gold_expr, False), (gold, pred_expr, True)):
        number = _parse_number(clean_answer(text))
        if number is None or number.ulp is None:
            continue
        try:
            value = _real_value(other)
        except Exception:  # sympy cannot say: leave it to verify
            return None
        if value is not None:
            return _number_against_value(number, value[0], exact=value[1], gold=is_gold)
    return None


def _die_with_parent() -> None:  # pragma: no cover - runs in the worker process
    """Ask Linux to kill this worker when its parent dies, even mid-computation (best effort).

    An idle worker exits anyway at EOF on stdin; this covers a parent killed while a worker is
    stuck in a long comparison that nobody will wait for.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


def serve_stdio() -> None:  # pragma: no cover - runs in the worker process
    """Worker loop: read ``[pred, gold, strict]`` JSON lines on stdin, answer ``true``/``false``.

    The protocol's stdout is a private copy of fd 1; fd 1 itself is pointed at stderr so that a
    library printing to stdout cannot corrupt it.
    """
    _die_with_parent()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _quiet_math_verify()
    math_verify_equal("1", "1")  # import and warm the parser before the first timed request
    out.write("ready\n")
    for line in sys.stdin:
        try:
            pred, gold, *rest = json.loads(line)
            result = _symbolic_verdict(str(pred), str(gold), None, strict=bool(rest and rest[0]))
        except Exception:
            result = False
        out.write("true\n" if result else "false\n")


class _Spawner:
    """A long-lived thread that starts every worker process of this process.

    Workers ask Linux to kill them when their parent dies (``PR_SET_PDEATHSIG``), and Linux takes
    "parent" to mean the *thread* that started the child: a worker started straight from a
    thread pool's thread would die when that thread ends. Starting them all from this thread,
    which lives as long as the process, keeps them alive as long as the process.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], object], queue.Queue[tuple[bool, object]]]]
        self._requests = queue.Queue()
        threading.Thread(target=self._serve, name="prmsearch-verifier-spawner", daemon=True).start()

    def _serve(self) -> None:
        while True:
            make, reply = self._requests.get()
            try:
                reply.put((True, make()))
            except BaseException as exc:
                reply.put((False, exc))

    def call(self, make: Callable[[], _T]) -> _T:
        """``make()``, run on the spawner thread; its exception is raised here."""
        reply: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=1)
        self._requests.put((make, reply))
        ok, value = reply.get()
        if not ok:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]


_spawners: dict[int, _Spawner] = {}
_spawners_lock = threading.Lock()


def _spawner() -> _Spawner:
    """This process's spawner (a forked child gets its own: threads do not survive a fork)."""
    with _spawners_lock:
        spawner = _spawners.get(os.getpid())
        if spawner is None:
            spawner = _spawners[os.getpid()] = _Spawner()
        return spawner


def _start_worker_process() -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", "from prmsearch.benchmarks.grading import serve_stdio; serve_stdio()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


class _Worker:
    """One child Python process answering comparisons over its stdin/stdout pipes."""

    def __init__(self, startup_timeout_s: float) -> None:
        self.process = _spawner().call(_start_worker_process)
        try:
            ready = self._read_line(startup_timeout_s) == "ready"
        except BaseException:
            self.kill()
            raise
        if not ready:
            self.kill()
            raise RuntimeError(f"math-verify worker did not start within {startup_timeout_s} s")

    def _read_line(self, timeout_s: float) -> str | None:
        """The next line from the worker, or None after ``timeout_s`` or if it died."""
        stdout = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        if not ready:
            return None
        line = stdout.readline()
        return line.decode().strip() if line else None

    def ask(self, pred: str, gold: str, timeout_s: float, strict: bool = False) -> bool | None:
        """The verdict, or None when the worker overran ``timeout_s`` or died."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps([pred, gold, strict]) + "\n").encode())
            stdin.flush()
        except OSError:
            return None
        line = self._read_line(timeout_s)
        return None if line is None else line == "true"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # unflushed bytes to a dead worker: no one to read them
                    stream.close()

    def stop(self) -> None:
        """Close the worker's stdin (it exits at EOF), then make sure it is gone."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class VerifierPool:
    """A small, thread-safe pool of math-verify worker processes with a per-call time limit.

    At most ``max_workers`` comparisons run at once (further callers wait for a free worker);
    workers are started on first need and reused; one that overruns its limit is killed and a
    fresh one is started on the next call. Workers are plain ``python -c`` subprocesses, not
    ``multiprocessing`` children, so they never re-import the caller's ``__main__`` (no
    ``if __name__ == "__main__":`` guard needed), are safe to start from any thread, and can be
    started from daemonic ``multiprocessing`` workers too.
    """

    def __init__(self, max_workers: int = 2, startup_timeout_s: float = 120.0) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        self.max_workers = max_workers
        self.startup_timeout_s = startup_timeout_s
        self.timeouts = 0
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_workers)
        self._idle: list[_Worker] = []
        self._pid = os.getpid()

    def equal(
        self, pred: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, strict: bool = False
    ) -> bool | None:
        """math-verify's verdict on ``pred`` vs ``gold``; None when it overran ``timeout_s``.

        ``strict`` drops the approximation rule (votes; see the module docstring).

        Raises RuntimeError or OSError when no worker can start.
        """
        if os.getpid() != self._pid:  # forked: the parent's workers are not ours to talk to
            self._reset()
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is not None and not worker.alive():  # killed from outside: not a timeout
                log.debug("math-verify worker %d had exited; starting another", worker.process.pid)
                worker.kill()
                worker = None
            if worker is None:
                worker = _Worker(self.startup_timeout_s)
            verdict = worker.ask(pred, gold, timeout_s, strict)
            if verdict is None:
                with self._lock:
                    self.timeouts += 1
                log.warning(
                    "math-verify overran %.1f s on %.60r vs %.60r; worker restarted", timeout_s, pred, gold
                )
                worker.kill()
            else:
                with self._lock:
                    self._idle.append(worker)
            return verdict

    def close(self) -> None:
        """Stop every idle worker (a busy one is stopped or reused when its caller returns it)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()


_pool: VerifierPool | None = None
_pool_lock = threading.Lock()
_inline_warned = False


def _default_pool() -> VerifierPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = VerifierPool()
            atexit.register(shutdown_verifier)
        return _pool


def shutdown_verifier() -> None:
    """Stop the shared math-verify workers (they also stop at interpreter exit)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


#: Signs of a comparison that may take unbounded time (towers, factorials, sums, huge numbers).
_COSTLY = re.compile(r"\^\s*\{[^{}]*\^|\^[^{}]*\^\s*\{|!|\\(?:sum|prod|int|lim)|\d{30}")


def _cheap_enough_inline(pred: str, gold: str) -> bool:
    """Whether a comparison looks safe to run inline without a time limit."""
    return all(len(s) <= 300 and _COSTLY.search(s) is None for s in (pred, gold))


def _inline_equal(pred: str, gold: str, timeout_s: float, strict: bool = False) -> bool:
    """Fallback where no child process can start (see layer 3 in the module docstring).

    In the main thread math-verify's ``signal.alarm`` limit applies. Elsewhere nothing can stop
    a computation (a thread cannot be killed, and sympy holds the GIL through long integer
    operations), so only comparisons that look cheap are run; the others count as not equivalent.
    """
    global _inline_warned
    if threading.current_thread() is threading.main_thread() and hasattr(os, "fork"):
        limit: int | None = max(1, math.ceil(timeout_s))
    else:
        limit = None
        if not _inline_warned:
            _inline_warned = True
            log.warning(
                "no worker process can start here: math-verify runs inline without a time limit, "
                "and answers that look costly count as not equivalent"
            )
        if not _cheap_enough_inline(pred, gold):
            return False
    try:
        return _symbolic_verdict(pred, gold, limit, strict)
    except Exception:
        return False


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
