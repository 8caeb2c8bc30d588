"""Finding the prefixes that several inputs of one call share (`prmsearch.engines.shared_prefix`)."""

from __future__ import annotations

import pytest

from prmsearch.engines.shared_prefix import SharedPrefix, common_prefix_length, shared_prefix_runs


def test_common_prefix_length():
    assert common_prefix_length([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([5], [6]) == 0


def test_inputs_sharing_a_long_prefix_form_one_group_cut_to_their_limits():
    question = list(range(100, 140))  # 40 shared tokens
    ids = [[*question, 1, 2, 3], [7, 7, 7], [*question, 4, 5], [*question, 6]]
    found = shared_prefix_runs(ids, [0, 0, 0, 0], [len(i) - 1 for i in ids], min_tokens=16)
    assert found == [SharedPrefix(40, (0, 2, 3))]
    # a member that must read its output at token 30 cuts the prefix there
    found = shared_prefix_runs(ids, [0, 0, 0, 0], [42, 2, 41, 30], min_tokens=16)
    assert found == [SharedPrefix(30, (0, 2, 3))]


def test_no_group_where_the_cache_already_gives_the_prefix_or_it_is_short():
    question = list(range(20))
    ids = [[*question, 1], [*question, 2]]
    assert shared_prefix_runs(ids, [0, 0], [20, 20], min_tokens=16) == [SharedPrefix(20, (0, 1))]
    assert shared_prefix_runs(ids, [10, 0], [20, 20], min_tokens=16) == []  # adds 10 to input 0
    assert shared_prefix_runs(ids, [0, 0], [20, 20], min_tokens=21) == []
    assert shared_prefix_runs([question], [0], [19], min_tokens=4) == []  # one input: no group


def test_a_prefix_never_covers_a_whole_input():
    ids = [list(range(30)), [*list(range(30)), 9, 9]]
    assert shared_prefix_runs(ids, [0, 0], [40, 40], min_tokens=8) == [SharedPrefix(29, (0, 1))]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="2 inputs, 1 cached"):
        shared_prefix_runs([[1], [2]], [0], [0, 0], 4)
    with pytest.raises(ValueError, match="min_tokens"):
        shared_prefix_runs([[1]], [0], [0], 0)
