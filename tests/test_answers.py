"""Answer extraction for voting: boxed with brace matching, fbox, `\\boxed 5`, "the answer is"."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prmsearch.answers import AnswerMatcher, canonical_answer, extract_answer, extract_boxed_answer


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


# --- vote grouping does not depend on the order answers arrive in ------------------------------


def _first_match_partition(matcher, answers):
    """Group as the search driver and offline aggregation do: canonical key, else first match."""
    groups: dict[str, int] = {}
    labels = []
    for answer in answers:
        canonical = matcher.canonicalize(answer)
        if canonical not in groups:
            match = next((g for other, g in groups.items() if matcher.same(canonical, other)), None)
            groups[canonical] = len(set(groups.values())) if match is None else match
        labels.append(groups[canonical])
    return _partition(answers, labels)


def _partition(answers, labels):
    by_label: dict[int, set[str]] = {}
    for answer, label in zip(answers, labels):
        by_label.setdefault(label, set()).add(answer)
    return frozenset(frozenset(members) for members in by_label.values())


def _within_one(a, b):
    """A non-transitive checker: 1 ~ 2 and 2 ~ 3, but not 1 ~ 3."""
    return abs(int(a) - int(b)) <= 1


def test_group_is_order_independent_even_for_a_non_transitive_checker():
    from itertools import permutations

    answers = ["1", "3", "2", "7", "1.0", "9"]
    matcher = AnswerMatcher(equivalent=_within_one)
    partitions = {_partition(order, matcher.group(list(order))) for order in permutations(answers)}
    assert partitions == {frozenset({frozenset({"1", "1.0", "2", "3"}), frozenset({"7"}), frozenset({"9"})})}


def test_group_labels_follow_first_appearance():
    assert AnswerMatcher().group(["b", "a", "b", "1.0", "1"]) == [0, 1, 0, 2, 2]
    assert AnswerMatcher().group([]) == []


VOTES_THAT_USED_TO_DEPEND_ON_ORDER = [
    ["1000000", "1000001.8", "1000000.9"],  # a relative tolerance chains 1000000 ~ .9 ~ 1.8
    ["50\\%", "0.5", "50"],  # a percent read two ways joins two different numbers
    ["1000,99", "1000.99", "1000, 99"],  # a decimal comma read by context
    ["0.3333333", "\\frac{1}{3}", "0.33333333"],  # approximations of 1/3 at different precisions
]


@pytest.mark.parametrize("answers", VOTES_THAT_USED_TO_DEPEND_ON_ORDER)
def test_search_votes_do_not_depend_on_arrival_order(answers):
    from itertools import permutations

    from prmsearch.benchmarks.grading import search_matcher

    partitions = {_first_match_partition(search_matcher(), list(order)) for order in permutations(answers)}
    assert len(partitions) == 1, partitions
    batch = {_partition(order, search_matcher().group(list(order))) for order in permutations(answers)}
    assert batch == partitions


def test_search_votes_keep_exact_classes_together():
    from prmsearch.benchmarks.grading import search_matcher

    labels = search_matcher().group(
        ["1,000", "1000.0", "\\frac{2000}{2}", "1001", "\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"]
    )
    assert labels == [0, 0, 0, 1, 2, 2]


@pytest.mark.parametrize(("text", "answer"), [
    ("She has 5 left.\n#### 5", "5"),
    ("48 + 24 = 72 clips.\n\n####   72", "72"),
    ("Natalia sold 72 clips. The answer is 72.", "72"),
    ("Step 2: 48 + 24 = 72. \\boxed{72}", "72"),
])
def test_gsm8k_answers_are_read_from_a_box_a_marker_or_a_cue(text, answer):
    assert extract_answer(text) == answer


def test_a_gsm8k_marker_counts_only_at_a_line_start():
    assert extract_answer("We write x #### 3 in the middle of a line") is None


_PIECES = ["\\boxed{7}", "\\boxed{x^{2}}", "\\fbox{(1, 2)}", "\\boxed 5", "\\boxed{", "\\fbox{", "{", "}",
           "7", "x^{2}", ", ", " and ", "$", "\\(", "The answer is 4. ", "#### 9", "\n", " ", "\\frac{1}{2}"]
_FREE = [piece for piece in _PIECES if "box" not in piece]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FREE), max_size=8).map("".join), max_size=4),
       st.lists(st.sampled_from(_PIECES), min_size=1, max_size=10).map("".join))
def test_a_boxed_last_step_is_read_alone_when_no_step_before_holds_a_box(earlier, last):
    """The driver reads a finished step's boxed answer off the step alone (with stop_on_answer
    no step above it holds a box): that must equal reading the whole path."""
    boxed = extract_boxed_answer(last)
    if boxed is not None:
        assert boxed == extract_answer("\n\n".join([*earlier, last]))
