"""Final-answer extraction, canonical forms and vote grouping, shared by voting and grading.

Extraction, in order of preference:

1. **Boxes.** The last well-formed ``\\boxed{...}`` or ``\\fbox{...}`` (brace matching, nested
   braces, ``\\boxed 5``). Several boxes in a row that are one answer are collected: boxes joined
   only by a list word or mark (``,``, ``;``, ``and``, ``or``, ``\\text{ and }``, ``$``, a
   ``x =`` before the next box) and of the same shape (all single values, or all pairs of the
   same length) become one comma-separated list: ``\\boxed{1}, \\boxed{2}`` gives ``1, 2`` and
   ``\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}`` gives ``(2, 2), (6, 2)``. A box that
   repeats the previous one adds nothing. Boxes separated by prose (``first \\boxed{1} then
   \\boxed{2}``) or of different shapes are separate statements: the last one is the answer.
2. **A cue.** The text after the last "answer is", "final answer:" or GSM8K's ``####`` at a line
   start, up to the end of its sentence or line, ``$`` signs removed.
3. **Bare maths.** A response that is nothing but one maths span (``$9$``, ``$$...$$``,
   ``\\(...\\)``, ``\\[...\\]``) is its own answer. Inline maths in the middle of prose is not
   an answer (a search path that merely mentions ``$x = 3$`` has not answered).

Every step is linear in the text's length (one pass for braces, bounded look-backs), so no input
makes extraction slow, and none makes it raise.

Canonical forms make exactly equal answers ("1,000" and "1000.0", "\\frac{1}{2}" and "0.5") vote
together; a checker can refine that through :class:`AnswerMatcher`, whose :meth:`~AnswerMatcher.group`
partitions answers the same way whatever order they arrive in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

_BOX_COMMANDS = ("\\boxed", "\\fbox")
#: Where a final answer is announced; the answer is what follows the last cue.
_ANSWER_CUE = re.compile(r"answer is|final answer[*\s]*:|^\s*####", re.IGNORECASE | re.MULTILINE)
#: What follows a cue: the answer runs to the end of its sentence or line.
_ANSWER_TAIL = re.compile(r"[:\s]*(.+?)(?:\.\s*$|\.\s+[A-Z]|\n|$)", re.IGNORECASE)
#: How many cues, from the last, are tried before giving up (bounds the work on odd text).
_MAX_CUES_TRIED = 16
#: A response that is one maths span and nothing else.
_BARE_MATHS = (
    re.compile(r"\$\$([^$]+)\$\$\.?", re.DOTALL),
    re.compile(r"\$([^$]+)\$\.?", re.DOTALL),
    re.compile(r"\\\[(.+?)\\\]\.?", re.DOTALL),
    re.compile(r"\\\((.+?)\\\)\.?", re.DOTALL),
)
#: Text between two boxes that makes them one answer, once spacing, ``$`` and ``\\text{}`` go.
_BOX_SEPARATOR = re.compile(r"(?:,|;|and|or|,and|,or|&)(?:[a-z](?:_\{?\w+)?=)?")
_SEPARATOR_NOISE = re.compile(
    r"\$|\\[()\[\]]|\\q?quad|\\[,;:! ]|~|\\(?:text|textbf|textrm|mathrm|mbox)\{|[{}\s]"
)
#: Python refuses int <-> str conversions past 4,300 digits; longer numbers go in chunks.
_DIGIT_CHUNK = 4000


# ---------------------------------------------------------------------------------------------
# Big integers without the int/str conversion limit
# ---------------------------------------------------------------------------------------------


def int_from_digits(digits: str) -> int:
    """The integer written by ``digits`` (ASCII 0-9 only), at any length.

    ``int(s)`` raises past 4,300 digits (Python's guard against quadratic conversions); answers
    may legitimately be longer, so long strings are converted in chunks.
    """
    if len(digits) <= _DIGIT_CHUNK:
        return int(digits) if digits else 0
    value = 0
    for start in range(0, len(digits), _DIGIT_CHUNK):
        chunk = digits[start : start + _DIGIT_CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def digits_of(n: int) -> str:
    """``str(n)`` for an integer of any size (see :func:`int_from_digits`)."""
    if n < 0:
        return "-" + digits_of(-n)
    if n.bit_length() <= 13_000:  # below 4,300 digits
        return str(n)
    high, low = divmod(n, 10**_DIGIT_CHUNK)
    return digits_of(high) + str(low).zfill(_DIGIT_CHUNK)


# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------


class _Box(NamedTuple):
    """One well-formed box: where it starts and ends in the text, and its content (a named
    tuple: the driver reads every finished path's boxes, and a tuple is the cheapest record)."""

    start: int
    end: int  # index just past the box
    content: str


_BRACE = re.compile(r"[{}]")
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BARE_BOX_VALUE = re.compile(r" +([^\s$]+)")


def brace_pairs(text: str) -> dict[int, int]:
    """Index of the closing brace for every ``{`` that is closed, in one pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE.finditer(text):  # visits the braces only, not every character
        i = match.start()
        if text[i] == "{":
            stack.append(i)
        elif stack:
            pairs[stack.pop()] = i
    return pairs


def _boxes(text: str) -> list[_Box]:
    """Every well-formed ``\\boxed``/``\\fbox`` in ``text``, in order (``{...}`` or ``\\boxed 5``)."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    pairs = brace_pairs(text)
    found: list[_Box] = []
    for match in _BOX_COMMAND.finditer(text):
        i = match.end()
        if i < len(text) and text[i] == "{":
            end = pairs.get(i)
            if end is not None:
                found.append(_Box(match.start(), end + 1, text[i + 1 : end].strip()))
        elif i < len(text) and text[i] == " ":
            bare = _BARE_BOX_VALUE.match(text[i : i + 200])
            if bare:
                found.append(_Box(match.start(), i + bare.end(), bare.group(1)))
    return found


def _top_level_commas(text: str) -> int:
    """How many commas sit outside every bracket of ``text``."""
    depth, commas = 0, 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            commas += 1
    return commas


def _shape(content: str) -> tuple[str, int]:
    """What a box holds: a single value, a bracketed n-tuple, a set, or a list."""
    s = content.replace("\\left", "").replace("\\right", "").strip()
    if s.startswith("\\{") and s.endswith("\\}"):
        return ("set", 0)
    if s[:1] in "([" and s[-1:] in ")]":
        return ("bracket", _top_level_commas(s[1:-1]) + 1)
    return ("list", 0) if _top_level_commas(s) else ("value", 1)


def _joins(gap: str) -> bool:
    """Whether the text between two boxes only separates items of one answer."""
    if len(gap) > 80:
        return False
    return _BOX_SEPARATOR.fullmatch(_SEPARATOR_NOISE.sub("", gap).lower()) is not None


def _last_box_run(boxes: list[_Box], text: str) -> list[str]:
    """The contents of the last box and of the boxes before it that form one answer with it."""
    last = boxes[-1]
    if len(boxes) == 1:  # the common case: one box, nothing to join
        return [last.content] if last.content else []
    shape = _shape(last.content)
    run = [last.content]
    if shape[0] in ("value", "bracket"):
        for before, after in zip(reversed(boxes[:-1]), reversed(boxes[1:])):
            if _shape(before.content) != shape or not _joins(text[before.end : after.start]):
                break
            run.append(before.content)
    run.reverse()
    return list(dict.fromkeys(item for item in run if item))  # a repeated box adds nothing


def extract_boxed(text: str) -> str | None:
    """The content of the last well-formed ``\\boxed``/``\\fbox`` in ``text``, or None."""
    boxes = _boxes(text)
    return boxes[-1].content if boxes else None


def _after_cue(text: str) -> str | None:
    """The answer after the last "answer is" / "final answer:" cue, or None."""
    cues = list(_ANSWER_CUE.finditer(text))
    for cue in reversed(cues[-_MAX_CUES_TRIED:]):
        tail = _ANSWER_TAIL.match(text, cue.end())
        if tail:
            answer = tail.group(1).strip(" *$")
            return answer.rstrip(".").strip() or None
    return None


def _bare_maths(text: str) -> str | None:
    """The content of a response that is one maths span and nothing else."""
    s = text.strip()
    for pattern in _BARE_MATHS:
        match = pattern.fullmatch(s)
        if match:
            return match.group(1).strip() or None
    return None


def extract_boxed_answer(text: str) -> str | None:
    """The boxed part of `extract_answer`: the last box with the boxes that form one answer with
    it, or None when ``text`` holds no well-formed box. Equal to `extract_answer` on any longer
    text that only adds box-free text in front (the driver reads a finished step alone)."""
    boxes = _boxes(text)
    if boxes:
        run = _last_box_run(boxes, text)
        if run:
            return ", ".join(run)
    return None


def extract_answer(text: str) -> str | None:
    """Final answer of a solution: boxed answer(s), else a cue, else bare maths (module docstring)."""
    if not text or not isinstance(text, str):
        return None
    return extract_boxed_answer(text) or _after_cue(text) or _bare_maths(text)


# ---------------------------------------------------------------------------------------------
# Canonical forms
# ---------------------------------------------------------------------------------------------

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")
_DECIMAL = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d{1,6}))?")
_RATIO = re.compile(r"(-?\d+)/(\d+)")
#: Numbers past this exponent are not turned into exact fractions (1e999999 would be huge).
_MAX_EXPONENT = 400


def _squeeze(s: str) -> str:
    """Drop whitespace, except that a comma followed by space outside brackets stays ``, ``.

    A comma and a space separate list items (``32, 349`` is two numbers); without the space a
    comma may group thousands (``32,349``), so the two must keep different canonical forms.
    """
    out: list[str] = []
    depth = 0
    pending_space = False
    for ch in s:
        if ch.isspace():
            pending_space = True
            continue
        if pending_space and depth == 0 and out and out[-1] == ",":
            out.append(" ")
        pending_space = False
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        out.append(ch)
    return "".join(out)


def canonical_answer(answer: str) -> str:
    """A normal form under which exactly equal answers compare equal as strings.

    Strips spacing commands, ``$``, ``\\left``/``\\right``, ``\\text{}`` wrappers, degree marks,
    a leading ``x=``, thousands commas and trailing zeros; numbers (including simple
    ``\\frac{a}{b}``) become reduced fractions or integers. Whitespace goes, except after a
    top-level list comma (see :func:`_squeeze`).
    """
    s = answer.strip()
    s = _TEXT_WRAPPER.sub(r"\1", s)
    s = re.sub(r"(?<=\d)(?:,\\!|\{,\}(?:\\!)?)\s*(?=\d{3}(?!\d))", ",", s)  # LaTeX thousands: 32,\\! 349
    for token in ("\\!", "\\,", "\\;", "\\:", "\\left", "\\right", "$", "^\\circ", "^{\\circ}"):
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)
    s = _squeeze(s).rstrip(".")
    number = _as_number(s)
    if number is not None:
        return digits_of(number.numerator) if number.denominator == 1 else _fraction_text(number)
    return s


def _fraction_text(value: Fraction) -> str:
    return f"{digits_of(value.numerator)}/{digits_of(value.denominator)}"


def exact_decimal(text: str) -> Fraction | None:
    """``[+-]digits[.digits][e[+-]n]`` as an exact fraction, at any length; else None."""
    m = _DECIMAL.fullmatch(text)
    if m is None or not (m.group(2) or m.group(3)):
        return None
    whole, frac = m.group(2), m.group(3) or ""
    value = Fraction(int_from_digits(whole + frac), 10 ** len(frac))
    if m.group(4) is not None:
        exponent = int(m.group(4))
        if abs(exponent) > _MAX_EXPONENT:
            return None
        value *= Fraction(10) ** exponent
    return -value if m.group(1) == "-" else value


def _as_number(s: str) -> Fraction | None:
    """Parse integers, decimals (thousands commas allowed) and simple fractions exactly."""
    plain = s
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", plain):
        plain = plain.replace(",", "")
    value = exact_decimal(plain)
    if value is not None:
        return value
    frac = _FRAC.match(plain)
    if frac:
        value = _signed_ratio(frac.group(2), frac.group(3))
        return None if value is None else -value if frac.group(1) else value
    ratio = _RATIO.fullmatch(plain)
    return _signed_ratio(ratio.group(1), ratio.group(2)) if ratio else None


def _signed_ratio(numerator: str, denominator: str) -> Fraction | None:
    """``numerator/denominator`` (each digits with an optional ``-``), None when dividing by 0."""
    num, den = (
        -int_from_digits(text[1:]) if text.startswith("-") else int_from_digits(text)
        for text in (numerator, denominator)
    )
    return None if den == 0 else Fraction(num, den)


# ---------------------------------------------------------------------------------------------
# Grouping answers for votes
# ---------------------------------------------------------------------------------------------


@dataclass
class AnswerMatcher:
    """Groups answers that are the same: by canonical form, then by an optional checker.

    ``equivalent`` (e.g. a symbolic math checker) is consulted only for answers whose canonical
    forms differ, once per pair, so voting stays cheap. :meth:`group` partitions a batch of
    answers independently of their order, even for a checker that is not transitive.
    """

    canonicalize: Callable[[str], str] = canonical_answer
    equivalent: Callable[[str, str], bool] | None = None
    _pair_cache: dict[tuple[str, str], bool] = field(default_factory=dict, repr=False)

    def same(self, a: str, b: str) -> bool:
        """Whether two canonical answers are equivalent."""
        if a == b:
            return True
        if self.equivalent is None:
            return False
        key = (a, b) if a <= b else (b, a)
        if key not in self._pair_cache:
            try:
                self._pair_cache[key] = bool(self.equivalent(*key))
            except Exception:
                self._pair_cache[key] = False
        return self._pair_cache[key]

    def group(self, answers: Sequence[str]) -> list[int]:
        """A group label per answer; equal labels vote together.

        Groups are the connected components of "same canonical form, or ``equivalent``", so the
        partition is the same for every order of ``answers`` (first-match grouping is not, when
        the checker is not transitive: 1 ~ 2 ~ 3 but 1 !~ 3). Labels count from 0 in order of
        first appearance.
        """
        keys = [self.canonicalize(answer) for answer in answers]
        distinct = sorted(set(keys))
        parent = {key: key for key in distinct}

        def root(key: str) -> str:
            while parent[key] != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        for i, a in enumerate(distinct):
            for b in distinct[i + 1 :]:
                ra, rb = root(a), root(b)
                if ra != rb and self.same(a, b):
                    parent[max(ra, rb)] = min(ra, rb)
        labels: dict[str, int] = {}
        return [labels.setdefault(root(key), len(labels)) for key in keys]
