"""SearchTree: columns, helpers, JSON round trip and invariants (property-based)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prmsearch.search.aggregation import (
    Aggregation,
    aggregate_scores,
    path_score,
    ranked_path_scores,
    ranking_key,
)
from prmsearch.tree import NO_PARENT, ROOT, SearchTree


def small_tree() -> SearchTree:
    tree = SearchTree("what is 2+2?")
    a = tree.add_node(ROOT, "2+2 = 4", (5, 6), -0.5)
    b = tree.add_node(ROOT, "2+2 = 5", (5, 7), -2.0)
    c = tree.add_node(a, "\\boxed{4}", (9,), -0.1, "eos")
    tree.set_score(a, 0.9)
    tree.set_score(b, 0.2)
    tree.set_score(c, 0.8)
    tree.mark_terminal(c, answer="4", group=tree.add_answer_group("4"))
    return tree


def test_root_and_constants():
    tree = SearchTree("q")
    assert ROOT == 0 and NO_PARENT == -1
    assert len(tree) == 1 and tree.parent[ROOT] == NO_PARENT and tree.depth[ROOT] == 0
    assert tree.leaves() == [ROOT]


def test_path_children_leaves_and_scores():
    tree = small_tree()
    assert tree.children(ROOT) == [1, 2]
    assert tree.path(3) == [1, 3]
    assert tree.path_steps(3) == ("2+2 = 4", "\\boxed{4}")
    assert tree.leaves() == [2, 3]
    assert tree.terminals() == [3]
    np.testing.assert_allclose(tree.step_scores(3), [0.9, 0.8])
    assert tree.answer[3] == "4" and tree.answer_groups == ["4"]
    assert tree.column("depth").tolist() == [0, 1, 1, 2]


def test_json_round_trip_is_identical():
    tree = small_tree()
    back = SearchTree.from_json(tree.to_json())
    assert back == tree
    assert back.token_ids[1] == (5, 6)
    assert math.isnan(back.score[ROOT])
    assert back.children(ROOT) == [1, 2]


def test_add_node_rejects_unknown_parent():
    tree = SearchTree("q")
    try:
        tree.add_node(5, "x")
    except IndexError as exc:
        assert "parent 5" in str(exc)
    else:
        raise AssertionError("expected IndexError")


def test_each_aggregation():
    scores = [0.9, 0.5, 0.7]
    assert aggregate_scores(scores, "min") == 0.5
    assert aggregate_scores(scores, "last") == 0.7
    assert math.isclose(aggregate_scores(scores, "prod"), 0.315)
    assert math.isclose(aggregate_scores(scores, "mean"), 0.7)
    assert math.isnan(aggregate_scores([], "min"))


@st.composite
def random_trees(draw):
    tree = SearchTree(draw(st.text(max_size=10)))
    for _ in range(draw(st.integers(0, 40))):
        parent = draw(st.integers(0, len(tree) - 1))
        node = tree.add_node(
            parent,
            draw(st.text(max_size=8)),
            tuple(draw(st.lists(st.integers(0, 1000), max_size=4))),
            draw(st.floats(-50, 0)),
        )
        tree.set_score(node, draw(st.floats(0, 1)))
        if draw(st.booleans()):
            tree.mark_terminal(node, truncated=draw(st.booleans()))
    return tree


@settings(max_examples=60, deadline=None)
@given(random_trees())
def test_tree_invariants(tree):
    for node in tree.iter_nodes():
        path = tree.path(node)
        assert len(path) == tree.depth[node]
        if node != ROOT:
            parent = tree.parent[node]
            assert node in tree.children(parent)
            assert tree.depth[node] == tree.depth[parent] + 1
            assert parent < node
            scores = tree.step_scores(node)
            for agg in Aggregation:
                assert math.isclose(path_score(tree, node, agg), aggregate_scores(scores, agg), rel_tol=1e-9)
    nodes = list(tree.iter_nodes())
    for agg in Aggregation:  # the column form strategies rank with equals the per-node form
        assert ranked_path_scores(tree, nodes, agg) == [ranking_key(path_score(tree, n, agg)) for n in nodes]
    assert set(tree.leaves()) == {n for n in tree.iter_nodes() if not tree.children(n)}
    assert sum(len(tree.children(n)) for n in tree.iter_nodes()) == len(tree) - 1
    assert SearchTree.from_json(tree.to_json()) == tree


def test_add_steps_equals_adding_nodes_one_by_one():
    from prmsearch.tree import SearchTree

    one, bulk = SearchTree("q"), SearchTree("q")
    a = one.add_node(0, "a", (1,), -0.5)
    bulk.add_node(0, "a", (1,), -0.5)
    parents = [0, a, a, 0]
    texts = ["b", "c", "d", "e"]
    ids = [(2,), [3, 4], (), (5,)]
    logprobs = [-1.0, -2.0, -3.0, -4.0]
    finishes = ["step", "eos", "step", "length"]
    for args in zip(parents, texts, ids, logprobs, finishes, strict=True):
        one.add_node(*args)
    first = bulk.add_steps(parents, texts, ids, logprobs, finishes)
    assert first == 2 and len(bulk) == len(one) == 6
    for name in ("parent", "depth", "step_text", "token_ids", "logprob", "finish", "terminal",
                 "answer", "answer_group", "visits", "value_sum", "truncated"):
        assert getattr(bulk, name) == getattr(one, name), name
    for name in ("score", "path_min", "path_sum", "path_prod"):
        assert str(getattr(bulk, name)) == str(getattr(one, name)), name  # NaN == NaN as text
    assert [bulk.children(n) for n in range(6)] == [one.children(n) for n in range(6)]
    assert bulk.add_steps([], [], [], [], []) == 6 and len(bulk) == 6


def test_add_steps_rejects_bad_parents_and_ragged_columns():
    import pytest

    from prmsearch.tree import SearchTree

    tree = SearchTree("q")
    with pytest.raises(IndexError, match="parent 3"):
        tree.add_steps([0, 3], ["a", "b"], [(), ()], [0.0, 0.0], ["step", "step"])
    with pytest.raises(ValueError, match="one step text"):
        tree.add_steps([0, 0], ["a"], [(), ()], [0.0, 0.0], ["step", "step"])
    assert len(tree) == 1


def test_add_steps_writes_a_chain_in_one_call():
    import pytest

    from prmsearch.tree import SearchTree

    tree = SearchTree("q")
    first = tree.add_steps([0, 1, 2], ["a", "b", "c"], [(), (), (7,)], [0.0, 0.0, -1.0],
                           ["step", "step", "eos"])
    assert first == 1 and tree.parent == [-1, 0, 1, 2] and tree.depth == [0, 1, 2, 3]
    assert tree.path_steps(3) == ("a", "b", "c")
    with pytest.raises(IndexError, match="parent 5"):
        tree.add_steps([0, 5], ["x", "y"], [(), ()], [0.0, 0.0], ["step", "step"])


def test_token_logprobs_are_a_column_that_round_trips():
    import pytest

    tree = SearchTree("q")
    a = tree.add_node(ROOT, "a b", (1, 2), -0.75, token_logprobs=(-0.25, -0.5))
    first = tree.add_steps([a, a], ["c", "d"], [(3,), (4,)], [-1.0, -math.inf], ["eos", "eos"],
                           [[-1.0], (-math.inf,)])
    assert tree.token_logprobs == [(), (-0.25, -0.5), (-1.0,), (-math.inf,)]
    assert all(type(lps) is tuple for lps in tree.token_logprobs)
    assert tree.add_node(first, "e", (5,), -0.1) and tree.token_logprobs[-1] == ()  # none given
    back = SearchTree.from_json(tree.to_json())  # strict JSON: -inf travels as a string
    assert back == tree and back.token_logprobs[3] == (-math.inf,)
    with pytest.raises(ValueError, match="1 token_logprobs"):
        tree.add_steps([0, 0], ["x", "y"], [(), ()], [0.0, 0.0], ["step", "step"], [()])
    with pytest.raises(KeyError, match="not a numeric column"):
        tree.column("token_logprobs")


def test_a_tree_written_before_token_logprobs_still_loads():
    tree = small_tree()
    old = tree.to_dict()
    del old["token_logprobs"]
    back = SearchTree.from_dict(old)
    assert back.token_logprobs == [()] * len(tree)
    assert back == tree and back.token_ids == tree.token_ids


def test_children_read_between_writes_stay_exact():
    # children lists catch up when read: reads between bulk writes and chains see every node
    tree = SearchTree("q")
    first = tree.add_steps([ROOT, ROOT], ["a", "b"], [(), ()], [0.0, 0.0], ["step", "step"])
    assert tree.children(ROOT) == [first, first + 1] and tree.leaves() == [first, first + 1]
    chain = tree.add_steps([first, len(tree)], ["c", "d"], [(), ()], [0.0, 0.0], ["step", "eos"])
    tree.add_node(first + 1, "e")
    assert tree.children(first) == [chain] and tree.children(chain) == [chain + 1]
    assert tree.children(first + 1) == [chain + 2]
    assert tree.leaves() == [chain + 1, chain + 2]
    back = SearchTree.from_dict(tree.to_dict())
    assert [back.children(n) for n in back.iter_nodes()] == [tree.children(n) for n in tree.iter_nodes()]
    back.add_node(chain + 2, "f")
    assert back.children(chain + 2) == [len(back) - 1] and back == back.from_dict(back.to_dict())
