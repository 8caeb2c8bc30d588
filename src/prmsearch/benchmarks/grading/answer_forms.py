"""Answer forms: the grader's fast path, in process and without sympy.

Layer 1 of :mod:`prmsearch.benchmarks.grading` (whose module docstring, the "grading docstring"
below, states the rules applied here). An answer is cleaned (:func:`clean_answer`), then read
once into its shape: a plain number (thousands commas, scientific notation, simple fractions,
unit and multiplier words, percent, approximation marks), a list, set, tuple or interval, a
multiple-choice letter or plain words. Two answers whose shapes this module fully understands get
a final verdict here (:func:`_quick_verdict`); anything else gets None, "ask math-verify", which
the grader hands to :mod:`prmsearch.benchmarks.grading.verifier_pool`. Every step is linear in the
answers' length, so the fast path needs no time limit and never starts a process.

This module imports neither the grader nor the verifier pool: it is the floor both stand on.

Why one module over 500 lines: the shapes are one small parser whose cases must agree with each
other (a number is never also a list); the rules are read in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from prmsearch.answers import brace_pairs, canonical_answer, int_from_digits

__all__ = ["APPROX_MIN_DIGITS", "MAX_ITEMS", "clean_answer"]

#: Significant digits a decimal needs before it may stand for a value it only approximates.
APPROX_MIN_DIGITS = 6
#: Collections with more items are left to math-verify (item matching is quadratic).
MAX_ITEMS = 64
#: Deeper nesting of collections is left to math-verify.
_MAX_NESTING = 8
#: Exponents past this size are not turned into exact fractions.
_MAX_EXPONENT = 400

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
    """Strip presentation that never changes an answer's value (see the grading docstring)."""
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
    when it is marked approximate). See "Approximation" in the grading docstring.
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
    """Lists, sets, tuples and intervals, compared as the gold's form says (grading docstring)."""
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
