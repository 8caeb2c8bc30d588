"""Grading: answer equivalence rules (one table row per decision), thread/process safety, time limit."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from prmsearch import answers
from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.grading import (
    VerifierPool,
    clean_answer,
    extract_answer,
    grade,
    gsm8k_gold,
    is_equivalent,
    search_matcher,
)
from prmsearch.benchmarks.grading import grader as grading

POWER_TOWER = "2^{2^{2^{2^{2^{2^{2^{2}}}}}}}"

# (pred, gold, expected): every row documents one decision of the grader.
EQUIVALENCE_TABLE = [
    # --- plain numbers (fast path, no math-verify) ---
    ("27", "27.0", True),  # AMC golds are floats as strings: 27 == 27.0
    ("-3", "-3.0", True),  # negative numbers keep their sign through the decimal comparison
    ("-3", "3", False),  # ... and a sign flip is wrong
    ("073", "73", True),  # AIME answers may carry leading zeros
    ("\\textbf{(073)}", "73", True),  # AIME solutions box "\textbf{(073)}": parentheses around one number
    ("1,000", "1000", True),  # thousands commas
    ("1,000 dollars", "1000", True),  # GSM8K: a unit word after the number is dropped
    ("$18", "18", True),  # a dollar sign (plain) ...
    ("\\$18", "18", True),  # ... or escaped, is presentation
    ("5 km", "5", True),  # unit separated by a space
    ("10\\text{ cm}^2", "10", True),  # \text{} unit with an exponent
    ("5x", "5", False),  # no space: "5x" is an expression, not 5 with a unit
    ("5cm", "5", True),  # ... but a known unit may be attached (canonical forms drop spaces)
    ("2 pi", "2", False),  # math words are never units
    ("1.5e3", "1500", True),  # scientific notation, plain
    ("1.5\\times10^{3}", "1500", True),  # scientific notation, LaTeX
    ("0.5", "\\frac{1}{2}", True),  # fraction vs decimal
    ("\\frac12", "0.5", True),  # \frac12 shorthand
    ("\\dfrac{3}{4}", "0.75", True),  # \dfrac is \frac
    ("3/4", "\\tfrac{3}{4}", True),  # a/b vs \tfrac
    ("0.3333333", "\\frac{1}{3}", True),  # within relative 1e-6: a repeating decimal written to 7 digits
    ("0.333", "\\frac{1}{3}", False),  # ... but 3 digits is not the answer
    ("50\\%", "0.5", True),  # a percentage equals its fraction
    ("50\\%", "50", True),  # ... and its bare number (decision: "what percent" answered 50 is right)
    ("50", "50\\%", True),  # symmetric
    ("50\\%", "5", False),  # no other reading
    ("25 percent", "0.25", True),  # the word "percent" is a percent sign
    ("x=5", "5", True),  # a leading single-variable assignment is tolerated
    ("5", "x = 5", True),  # ... on either side
    ("30^\\circ", "30", True),  # degree marks are presentation
    ("30^{\\circ}", "30", True),  # ... in braces too
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True),  # \left/\right and spacing
    # --- math-verify (symbolic, in a worker process) ---
    ("(1,2]", "(1,2)", False),  # intervals keep their open/closed ends
    ("[1,2)", "[1, 2)", True),  # ... and spacing does not matter
    ("(-\\infty,1)\\cup(2,\\infty)", "(-\\infty, 1) \\cup (2, \\infty)", True),  # unions of intervals
    ("(-\\infty,1]\\cup(2,\\infty)", "(-\\infty,1)\\cup(2,\\infty)", False),  # ... one closed end differs
    ("(1,2)", "(2,1)", False),  # ordered pairs keep their order
    ("\\{1,2\\}", "\\{2,1\\}", True),  # sets do not
    ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}", True),  # radicals in two spellings
    ("3\\sqrt{3}", "\\sqrt{27}", True),  # simplified radicals
    ("\\frac{\\pi}{2}", "\\pi/2", True),  # pi forms
    ("2\\pi", "2 \\pi", True),  # pi with spacing
    ("3.14", "\\pi", False),  # an approximation of an irrational is not accepted
    ("\\infty", "\\infty", True),  # infinity
    ("-\\infty", "\\infty", False),  # ... with its sign
    ("x^2+2x+1", "(x+1)^2", True),  # expanded vs factored polynomial
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),  # matrices
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\3\\end{pmatrix}", False),  # ... by entry
    ("\\sqrt[3]{2}", "2^{1/3}", True),  # roots vs fractional powers
    # --- text and multiple choice (fast path) ---
    ("\\text{Evelyn}", "Evelyn", True),  # \text{} wrappers
    ("\\text{East}", "east", True),  # words compare case-insensitively
    ("Evelyn", "Evelina", False),  # ... but must be the same word
    ("(C)", "C", True),  # multiple-choice letters with or without parentheses
    ("\\text{(C)}", "C", True),  # ... or \text{}
    ("(C) 12", "C", True),  # a choice letter followed by its value
    ("(B)", "C", False),  # a different letter
    ("X", "x", False),  # single letters are variables: case-sensitive
    # --- degenerate input ---
    ("", "5", False),  # nothing extracted
    ("\\frac{1}{2", "0.5", False),  # unbalanced LaTeX does not crash, it is simply wrong
]


@pytest.mark.parametrize(("pred", "gold", "expected"), EQUIVALENCE_TABLE)
def test_equivalence_table(pred: str, gold: str, expected: bool) -> None:
    assert is_equivalent(pred, gold) is expected


def test_table_is_large_enough() -> None:
    assert len(EQUIVALENCE_TABLE) >= 40


def test_none_prediction_is_wrong() -> None:
    assert is_equivalent(None, "5") is False


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        is_equivalent("1", "1", timeout_s=0)


def test_fast_path_starts_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> bool:
        raise AssertionError("math-verify must not be consulted")

    monkeypatch.setattr(grading, "_symbolic_equal", boom)
    assert is_equivalent("1,000 dollars", "1000")
    assert not is_equivalent("50\\%", "5")
    assert is_equivalent("\\text{Evelyn}", "Evelyn")


def test_clean_answer_strips_presentation() -> None:
    assert clean_answer("$x = \\dfrac{1}{2}$.") == "\\frac{1}{2}"
    assert clean_answer("\\text{ cm}") == "cm"


def test_extract_answer_is_the_shared_one() -> None:
    assert extract_answer is answers.extract_answer
    assert extract_answer("so \\boxed{\\frac{1}{\\sqrt{2}}} done") == "\\frac{1}{\\sqrt{2}}"
    assert extract_answer("Thus the answer is 42.") == "42"


def test_grade_extracts_then_compares() -> None:
    assert grade("We get $x=2$, so the answer is $\\boxed{\\dfrac{4}{2}}$.", "2")
    assert grade("The answer is 1,000.", "1000")
    assert not grade("no final answer here", "5")
    assert not grade("", "5")


def test_gsm8k_gold() -> None:
    assert gsm8k_gold("She makes 9 * 2 = $<<9*2=18>>18.\n#### 18") == "18"
    assert gsm8k_gold("... #### 1,600") == "1600"
    with pytest.raises(ValueError, match="####"):
        gsm8k_gold("no marker")


def test_search_matcher_uses_the_grader() -> None:
    matcher = search_matcher()
    assert isinstance(matcher, AnswerMatcher)
    assert matcher.same("\\frac{\\sqrt2}{2}", "\\sqrt{2}/2")
    assert not matcher.same("(1,2]", "(1,2)")


def test_is_equivalent_from_threads() -> None:
    grading._symbolic_equal.cache_clear()  # make every call below reach the worker pool
    pairs = [
        ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt3}", True),
        ("(0,5]", "(0,5)", False),
        ("4\\sqrt{2}", "\\sqrt{32}", True),
        ("(2,-1)", "(-1,2)", False),
        ("\\frac{\\pi}{3}", "60\\pi/180", True),
        ("\\{3,4\\}", "\\{4,3\\}", True),
    ] * 2
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda row: is_equivalent(row[0], row[1]), pairs))
    assert results == [expected for _, _, expected in pairs]


def _check_in_child(pair: tuple[str, str]) -> bool:
    return is_equivalent(*pair)


def test_is_equivalent_from_a_worker_process() -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        assert pool.submit(_check_in_child, ("\\frac{\\sqrt2}{2}", "\\sqrt{2}/2")).result(timeout=60)
        assert not pool.submit(_check_in_child, ("(1,2]", "(1,2)")).result(timeout=60)


def test_pathological_input_returns_within_the_limit() -> None:
    assert is_equivalent("\\sqrt{8}", "2\\sqrt{2}")  # warm a worker so the timing is the check alone
    grading._symbolic_equal.cache_clear()
    timeouts = grading._default_pool().timeouts
    start = time.monotonic()
    assert is_equivalent(POWER_TOWER, "1", timeout_s=1.0) is False
    assert time.monotonic() - start < 4.0
    assert grading._default_pool().timeouts == timeouts + 1
    # the overrunning worker was killed and replaced: the next symbolic check still works
    assert is_equivalent("\\sqrt{12}", "2\\sqrt{3}")


def test_pool_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        VerifierPool(max_workers=0)


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("32,\\! 349", "32349", True),  # LaTeX's thousands separator, even with a space after it
        ("11,\\! 111,\\! 111,\\! 100", "11111111100", True),
        ("10,\\!000", "10000", True),
        ("1{,}000", "1000", True),
        ("32, 349", "32349", False),  # a comma and a space separate list items
        ("1,\\! 2", "12", False),  # not a group of three digits
    ],
)
def test_latex_thousands_separators(answer, gold, expected):
    assert grading.is_equivalent(answer, gold) is expected
    if expected:
        assert canonical_answer(answer) == canonical_answer(gold)  # and they vote together
