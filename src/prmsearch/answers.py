"""Final-answer extraction and canonical forms, shared by voting and grading.

Extraction takes the last ``\\boxed{...}`` or ``\\fbox{...}`` with brace matching (nested braces,
``\\boxed 5``), falling back to "the answer is ...". Canonical forms make exactly equal answers
("1,000" and "1000.0", "\\frac{1}{2}" and "0.5") vote together; a symbolic checker can refine
that through :class:`AnswerMatcher`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_IS = re.compile(r"answer is[:\s]*(.+?)(?:\.\s*$|\.\s+[A-Z]|\n|$)", re.IGNORECASE)


def _matching_brace(text: str, open_index: int) -> int:
    """Index of the brace closing the one at ``open_index``, or -1 when unbalanced."""
    depth = 0
    for i in range(open_index, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _boxed_content(text: str, start: int, command: str) -> str | None:
    """Content of the box command starting at ``start`` (``{...}`` or ``\\boxed 5`` style)."""
    i = start + len(command)
    if i < len(text) and text[i] == "{":
        end = _matching_brace(text, i)
        return text[i + 1 : end] if end != -1 else None
    if i < len(text) and text[i] == " ":
        match = re.match(r" +([^\s$]+)", text[i:])
        return match.group(1) if match else None
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last well-formed ``\\boxed``/``\\fbox`` in ``text``, or None."""
    positions = []
    for command in _BOX_COMMANDS:
        start = text.rfind(command)
        while start != -1:
            positions.append((start, command))
            start = text.rfind(command, 0, start)
    for start, command in sorted(positions, reverse=True):
        content = _boxed_content(text, start, command)
        if content is not None:
            return content.strip()
    return None


def extract_answer(text: str) -> str | None:
    """Final answer of a solution: last boxed expression, else the text after "the answer is"."""
    if not text:
        return None
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    matches = _ANSWER_IS.findall(text)
    if matches:
        answer = matches[-1].strip().strip("$").strip()
        return answer.rstrip(".").strip() or None
    return None


_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_FRAC = re.compile(r"^-?\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$", re.IGNORECASE)


def canonical_answer(answer: str) -> str:
    """A normal form under which exactly equal answers compare equal as strings.

    Strips spacing commands, ``$``, ``\\left``/``\\right``, ``\\text{}`` wrappers, degree marks,
    a leading ``x=``, thousands commas and trailing zeros; numbers (including simple
    ``\\frac{a}{b}``) become reduced fractions or integers.
    """
    s = answer.strip()
    s = _TEXT_WRAPPER.sub(r"\1", s)
    for token in ("\\!", "\\,", "\\;", "\\:", "\\left", "\\right", "$", "^\\circ", "^{\\circ}"):
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    number = _as_number(s)
    if number is not None:
        return str(number.numerator) if number.denominator == 1 else str(number)
    return s


def _as_number(s: str) -> Fraction | None:
    """Parse integers, decimals (thousands commas allowed) and simple fractions exactly."""
    plain = s
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", plain):
        plain = plain.replace(",", "")
    if _NUMBER.match(plain):
        try:
            return Fraction(plain)
        except (ValueError, ZeroDivisionError):
            return None
    frac = _FRAC.match(plain)
    if frac and int(frac.group(2)) != 0:
        value = Fraction(int(frac.group(1)), int(frac.group(2)))
        return -value if plain.startswith("-") else value
    if re.fullmatch(r"-?\d+/\d+", plain) and not plain.endswith("/0"):
        return Fraction(plain)
    return None


@dataclass
class AnswerMatcher:
    """Groups answers that are the same: by canonical form, then by an optional checker.

    ``equivalent`` (e.g. a symbolic math checker) is consulted only for answers whose canonical
    forms differ, once per pair, so voting stays cheap.
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
                self._pair_cache[key] = bool(self.equivalent(a, b))
            except Exception:
                self._pair_cache[key] = False
        return self._pair_cache[key]
