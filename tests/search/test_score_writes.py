"""A round's scores written by columns (`last_scores`) when every reply is well formed, and node
by node, with the same errors as before, when one is not."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import synthetic_backends

from prmsearch import Searcher
from prmsearch.scorers.base import StepScores, path_score_request
from prmsearch.search.score_replies import last_scores


def requests(*lengths: int):
    return [path_score_request("q", tuple(f"s{i}" for i in range(k))) for k in lengths]


def test_well_formed_replies_become_columns():
    replies = [StepScores(np.array([0.2, 0.7]), 5, 3), StepScores([0.4, 0.1, 1.0], 2, 0)]
    values, computed, cached = last_scores(requests(2, 3), replies)
    assert values == [0.7, 1.0] and all(type(v) is float for v in values)
    assert computed == [5, 2] and cached == [3, 0]
    assert last_scores([], []) == ([], [], [])


@pytest.mark.parametrize(
    "reply",
    [
        None,  # the PRM could not read the path: it ends unscored, node by node
        StepScores(np.array([0.2])),  # one score for two steps
        StepScores(np.array([0.2, np.nan])),
        StepScores(np.array([0.2, 1.5])),
        StepScores(np.array([0.2, -0.1])),
        StepScores(np.array([[0.2], [0.3]])),  # a column, not one score per step
        StepScores(np.array([0.2, 0.3], dtype=np.float32)),  # left to the full check
    ],
)
def test_any_other_reply_sends_the_round_node_by_node(reply):
    good = StepScores(np.array([0.5, 0.5]))
    assert last_scores(requests(2, 2), [good, reply]) is None


class ScoresOver:
    """A scorer that answers one problem's paths with a score out of [0, 1]."""

    num_parameters = 1

    def __init__(self, scorer, bad_question: str) -> None:
        self.scorer, self.bad_question = scorer, bad_question

    def score(self, batch):
        out = self.scorer.score(batch)
        bad = [r.question == self.bad_question for r in batch]
        return [StepScores(np.full(len(r.steps), 1.5)) if b else s for r, s, b in zip(batch, out, bad)]


@pytest.mark.parametrize("name", ["beam", "particle_filter"])
def test_a_malformed_round_fails_its_problem_only(name):
    policy, scorer = synthetic_backends(depth=3)
    questions = [f"problem {i}" for i in range(4)]
    results = Searcher(policy, ScoresOver(scorer, "problem 2"), name, n=4).run(questions)
    assert results[2].error is not None and "scorer failed" in results[2].error
    assert results[2].error_kind == "malformed_reply"
    assert all(r.error is None and r.answer is not None for i, r in enumerate(results) if i != 2)
    expected = Searcher(*synthetic_backends(depth=3), name, n=4).run(questions)
    for i in (0, 1, 3):  # the well-formed problems search as they do alone with a plain scorer
        assert results[i].steps == expected[i].steps and results[i].step_scores == expected[i].step_scores


@pytest.mark.parametrize("rounds", [1, 20])  # 20 requests: the seeds of a round mixed in numpy
def test_each_request_is_seeded_by_node_and_expansion_count(rounds):
    """Seeds mix (problem seed, node, how often the node was expanded before), a node asked
    for twice in one round included, whichever way a round's seeds are computed."""
    from prmsearch.search.driver import Driver
    from prmsearch.search.job import Job
    from prmsearch.search.protocol import Expand, make_strategy
    from prmsearch.seeding import mix_seed

    policy, scorer = synthetic_backends(depth=3)
    writer = Driver(policy, scorer).writer
    job = Job(0, "q", make_strategy("beam", n=4), seed=11)
    nodes = [0] * 2 + list(range(1, rounds))  # only the root exists; check_expand is not run here
    job.tree.add_steps([0] * rounds, ["s"] * rounds, [()] * rounds, [0.0] * rounds, ["step"] * rounds)
    first = writer.requests(job, Expand(tuple((node, 1) for node in nodes)))
    again = writer.requests(job, Expand(((0, 1),)))
    expected = [mix_seed(11, 0, 0), mix_seed(11, 0, 1)] + [mix_seed(11, node, 0) for node in range(1, rounds)]
    assert [r.seed for r in first] == expected
    assert [r.seed for r in again] == [mix_seed(11, 0, 2)]


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        (((0, 2), (7, 1)), "expand node 7, not in the tree"),
        (((0, 2), (-1, 1)), "expand node -1, not in the tree"),
        (((0, 2), (2, 1)), "expand terminal node 2"),
        (((1, 0),), "asked for 0 children of node 1"),
        (((0, 1, 2),), "too many values"),  # not a (node, count) pair
    ],
)
def test_expand_requests_are_checked_with_the_first_bad_one_named(requests, message):
    from prmsearch.search.job import check_expand
    from prmsearch.search.protocol import Expand
    from prmsearch.tree import SearchTree

    tree = SearchTree("q")
    tree.add_steps([0, 0], ["a", "b"], [(), ()], [0.0, 0.0], ["step", "eos"])
    tree.mark_terminal(2)
    check_expand(tree, Expand(((0, 2), (1, 3), (1, 1))))  # open nodes, repeated ones too
    with pytest.raises(ValueError, match=message):
        check_expand(tree, Expand(requests))
