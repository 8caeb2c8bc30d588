"""Answer extraction for voting: boxed with brace matching, fbox, `\\boxed 5`, "the answer is"."""

from __future__ import annotations

import pytest

from prmsearch.answers import AnswerMatcher, canonical_answer, extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\{1, 2\\}} and \\boxed{x^{2}}", "x^{2}"),
        ("\\fbox{7}", "7"),
        ("\\boxed 5", "5"),
        ("$\\boxed 12$", "12"),
        ("\\boxed{1} then broken \\boxed{2", "1"),
        ("The answer is 17.", "17"),
        ("so the answer is: $3\\pi$", "3\\pi"),
        ("no answer here", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1,000", "1000"),
        ("7.0", "7"),
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "1/2"),
        ("x = 3", "3"),
        ("\\text{5}", "5"),
        ("90^\\circ", "90"),
        ("\\left(1,2\\right)", "(1,2)"),
        ("-\\frac{3}{4}", "-0.75"),
    ],
)
def test_canonical_forms_merge_equal_answers(a, b):
    assert canonical_answer(a) == canonical_answer(b)


@pytest.mark.parametrize(("a", "b"), [("1", "2"), ("(1,2)", "[1,2]"), ("x", "y")])
def test_canonical_forms_keep_different_answers_apart(a, b):
    assert canonical_answer(a) != canonical_answer(b)


def test_matcher_uses_a_pluggable_checker_and_survives_its_errors():
    def checker(a, b):
        if "boom" in (a, b):
            raise RuntimeError("checker crashed")
        return {a, b} == {"\\sqrt{4}", "2"}

    matcher = AnswerMatcher(equivalent=checker)
    assert matcher.same("\\sqrt{4}", "2")
    assert not matcher.same("boom", "2")
    assert AnswerMatcher().same("2", "2") and not AnswerMatcher().same("\\sqrt{4}", "2")
