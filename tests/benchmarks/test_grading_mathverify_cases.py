"""Regression cases in the spirit of Math-Verify's suite: a response, a gold answer, the verdict.

Every row goes through the whole user-facing path, :func:`extract_answer` then
:func:`is_equivalent` (that is :func:`grade`), and is grouped by the bug class it guards:
near-miss numbers, value-changing words, huge input, several boxed answers, a final answer in
``$...$`` with no box, and commas (thousands, decimal, list).
"""

from __future__ import annotations

import pytest

from prmsearch.answers import extract_answer
from prmsearch.benchmarks.grading import grade, is_equivalent, search_matcher

BIG = "9" * 5000  # past Python's 4,300-digit int/str conversion limit

# (response, gold, expected)
EXACT_NUMBERS = [
    ("\\boxed{1000001}", "1000000", False),  # integers are exact: no relative tolerance
    ("\\boxed{1000000}", "1000000", True),
    ("\\boxed{123456789}", "123456788", False),
    ("\\boxed{999999999999}", "1000000000000", False),
    ("\\boxed{0.30000001}", "0.3", False),  # exact decimals are exact
    ("\\boxed{1.0000001}", "1", False),
    ("\\boxed{0.3}", "\\frac{3}{10}", True),  # a terminating fraction is an exact decimal
    ("\\boxed{2.5}", "\\frac{5}{2}", True),
    ("\\boxed{1.5e6}", "1500000", True),
    ("\\boxed{(0.30000001, 2)}", "(0.3, 2)", False),  # ... inside a tuple too
    ("\\boxed{0.3333333}", "\\frac{1}{3}", True),  # 1/3 has no exact decimal: 7 digits, truncated
    ("\\boxed{0.6666667}", "\\frac{2}{3}", True),  # ... or rounded
    ("\\boxed{0.33}", "\\frac{1}{3}", False),  # ... but too few digits to name the answer
    ("\\boxed{0.3333333}", "\\frac{\\sqrt{4}}{6}", True),  # ... however 1/3 is written
    ("\\boxed{0.3333444}", "\\frac{1}{3}", False),  # ... and it must agree to its last digit
    ("\\boxed{1.4142136}", "\\sqrt{2}", True),  # an irrational gold accepts a long decimal
    ("\\boxed{3.14159265}", "\\pi", True),
    ("\\boxed{3.14}", "\\pi", False),  # ... not a short one
    ("\\boxed{1.4142999}", "\\sqrt{2}", False),  # ... nor a wrong one
    ("\\boxed{\\approx 1.41421}", "\\sqrt{2}", True),  # an explicit approximation
    ("\\boxed{x \\approx 1000000}", "1000000.4", True),  # ... may approximate an exact decimal
]

VALUE_WORDS = [
    ("The answer is 5 thousand.", "5", False),  # a multiplier is never dropped
    ("The answer is 5 thousand.", "5000", True),
    ("\\boxed{5\\text{ thousand}}", "5000", True),
    ("\\boxed{2 million}", "2", False),
    ("\\boxed{2.5 million}", "2500000", True),
    ("\\boxed{3 hundred}", "300", True),
    ("\\boxed{1 billion}", "1", False),
    ("\\boxed{5 dozen}", "5", False),
    ("\\boxed{5 squared}", "5", False),
    ("\\boxed{7 thousand dollars}", "7000", True),  # multiplier kept, unit dropped
    ("\\boxed{7 thousand dollars}", "7", False),
    ("\\boxed{5k}", "5", False),
    ("\\boxed{12 dollars}", "12", True),  # plain units are still dropped
    ("\\boxed{12\\text{ cm}}", "12", True),
    ("\\boxed{45 degrees}", "45", True),
    ("\\boxed{40\\%}", "40", True),
    ("\\boxed{25\\text{ square units}}", "25", True),  # "square" names the unit here
    ("The answer is 5 more apples.", "5", True),
    ("\\boxed{3 times}", "3", True),
]

HUGE_INPUT = [
    ("\\boxed{" + BIG + "}", BIG, True),
    ("\\boxed{" + BIG + "}", BIG[:-1] + "8", False),
    ("\\boxed{0" + BIG + "}", BIG, True),  # compared as numbers, not strings
    ("\\boxed{5", "5", False),  # an unclosed box is no answer
]

SEVERAL_BOXES = [
    ("\\boxed{1}, \\boxed{2}", "1, 2", True),
    ("\\boxed{1}, \\boxed{2}", "\\{1,2\\}", True),
    ("\\boxed{1}, \\boxed{2}", "{1,2}", True),  # a set written with bare braces
    ("\\boxed{2}, \\boxed{1}", "\\{1,2\\}", True),  # a set has no order
    ("\\boxed{1}, \\boxed{3}", "\\{1,2\\}", False),
    ("\\boxed{1}, \\boxed{2}", "2", False),  # hedging between answers is wrong
    ("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(2, 2), (6, 2)", True),
    ("\\boxed{(6, 2)} \\text{ and } \\boxed{(2, 2)}", "(2, 2), (6, 2)", True),  # a list of solutions
    ("\\boxed{(2, 6)} \\text{ and } \\boxed{(2, 2)}", "(2, 2), (6, 2)", False),  # pairs keep order
    ("$\\boxed{1}$ and $\\boxed{2}$", "1,2", True),
    ("\\boxed{2}, \\boxed{3}", "(2, 3)", True),  # a tuple gold: in order
    ("\\boxed{3}, \\boxed{2}", "(2, 3)", False),
    ("\\boxed{3}, \\boxed{3}", "3", True),  # the same answer boxed twice is one answer
    ("first \\boxed{1} then \\boxed{2}", "2", True),  # a later, separate box corrects an earlier one
]

NO_BOX = [
    ("$9$", "9", True),
    ("Final answer: $9$", "9", True),
    ("The final answer is $9$. I hope it is correct.", "9", True),
    ("$\\frac{1}{2}$", "0.5", True),
    ("We have $x = 3$ and then we continue", "3", False),  # inline maths mid-text is no answer
]

COMMAS = [
    ("\\boxed{1000,99}", "1000.99", True),  # a decimal comma (not three digits after it)
    ("\\boxed{3,5}", "3.5", True),
    ("\\boxed{1,000}", "1000", True),  # three digits after the comma: thousands
    ("\\boxed{1,000}", "1", False),
    ("\\boxed{12,345,678}", "12345678", True),
    ("\\boxed{32, 349}", "32349", False),  # a comma and a space separate a list
    ("\\boxed{32, 349}", "32, 349", True),
    ("\\boxed{32,349}", "32349", True),
    ("\\boxed{1,5}", "\\{1,5\\}", True),  # against a set, the comma separates
    ("\\boxed{2, 3}", "2.3", False),
    ("The answer is 1,000.", "1000", True),
]

COLLECTIONS = [
    ("\\boxed{\\{3, 1, 2\\}}", "\\{1,2,3\\}", True),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2, 3\\}", False),
    ("\\boxed{(1, 2)}", "(2, 1)", False),
    ("\\boxed{[1, 2)}", "[1,2)", True),
    ("\\boxed{(1, 2]}", "(1,2)", False),
]

CASES = EXACT_NUMBERS + VALUE_WORDS + HUGE_INPUT + SEVERAL_BOXES + NO_BOX + COMMAS + COLLECTIONS


def _label(row: tuple[str, str, bool]) -> str:
    response, gold, expected = row
    return f"{response[:40]!r}-vs-{gold[:20]!r}-{expected}"


@pytest.mark.parametrize(("response", "gold", "expected"), CASES, ids=[_label(r) for r in CASES])
def test_regression_case(response: str, gold: str, expected: bool) -> None:
    assert is_equivalent(extract_answer(response), gold) is expected
    assert grade(response, gold) is expected


def test_enough_cases_in_every_class() -> None:
    assert len(CASES) >= 40
    for rows in (EXACT_NUMBERS, VALUE_WORDS, SEVERAL_BOXES, NO_BOX, COMMAS):
        assert len(rows) >= 5


# --- the bugs, stated on the functions directly ----------------------------------------------


@pytest.mark.parametrize(
    ("pred", "gold"),
    [("1000001", "1000000"), ("0.30000001", "0.3"), ("1000000.9", "1000000"), ("100001", "100000")],
)
def test_integers_and_exact_decimals_compare_exactly(pred: str, gold: str) -> None:
    assert not is_equivalent(pred, gold)
    assert not is_equivalent(gold, pred)


@pytest.mark.parametrize(
    ("pred", "value"),
    [
        ("5 thousand", "5000"),
        ("5\\text{ thousand}", "5000"),
        ("5thousand", "5000"),
        ("5 Thousand", "5000"),
        ("5 million", "5000000"),
        ("1.5 billion", "1500000000"),
        ("5 hundred", "500"),
        ("5 dozen", "60"),
        ("5 thousand dollars", "5000"),
        ("5 squared", None),  # changes the value; not parsed here, never 5
        ("5 cubed", None),
        ("5 grand", None),
        ("5k", None),
        ("5 K", None),  # 5,000 or 5 kelvin: not guessed
    ],
)
def test_value_changing_words_are_never_stripped(pred: str, value: str | None) -> None:
    assert not is_equivalent(pred, "5")
    assert not is_equivalent("5", pred)
    if value is not None:
        assert is_equivalent(pred, value)
        assert is_equivalent(value, pred)


def test_units_are_still_stripped() -> None:
    for pred in ("5 dollars", "5 cm", "5 degrees", "5\\text{ km}", "5 apples"):
        assert is_equivalent(pred, "5"), pred


def test_huge_integers_do_not_raise() -> None:
    assert is_equivalent(BIG, BIG)
    assert is_equivalent(BIG, "0" + BIG)
    assert not is_equivalent(BIG, BIG[:-1] + "8")
    assert not is_equivalent(BIG + ".5", BIG)


def test_comma_space_is_a_list_separator() -> None:
    assert not is_equivalent("32, 349", "32349")
    assert not is_equivalent("32349", "32, 349")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{1}, \\boxed{2}", "1, 2"),
        ("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(2, 2), (6, 2)"),
        ("$\\boxed{1}$ and $\\boxed{2}$", "1, 2"),
        ("so $x = \\boxed{1}$ or $x = \\boxed{-1}$", "1, -1"),
        ("\\boxed{3}, \\boxed{3}", "3"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("$9$", "9"),
        ("$$\\frac{1}{2}$$", "\\frac{1}{2}"),
        ("Final answer: $9$", "9"),
    ],
)
def test_extraction_of_several_boxes_and_bare_maths(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


def test_votes_compare_exactly_while_grading_accepts_approximations() -> None:
    """Votes need an equivalence relation (order-independent groups): no tolerance, one reading."""
    votes = search_matcher()
    assert is_equivalent("1.4142136", "\\sqrt{2}") and not votes.same("1.4142136", "\\sqrt{2}")
    assert is_equivalent("0.3333333", "\\frac{1}{3}") and not votes.same("0.3333333", "1/3")
    assert is_equivalent("3,5", "3.5") and not votes.same("3,5", "7/2")
    assert is_equivalent("50\\%", "0.5") and not votes.same("50\\%", "1/2")
    assert votes.same("50\\%", "50") and votes.same("1,000", "1000") and votes.same("2, 1", "\\{1,2\\}")
    assert not votes.same("1000001", "1000000") and not votes.same("5thousand", "5")
