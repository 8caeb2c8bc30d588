"""A round's scores: checked against their requests (only the new steps must be probabilities),
written, and a malformed reply fails its own problem only; each request's seed."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import synthetic_backends

from prmsearch import Searcher
from prmsearch.scorers.base import ScoreRequest, StepScores, check_scores


def test_the_new_steps_scores_are_checked_and_returned():
    request = ScoreRequest("q", ("s0", "s1", "s2"))
    assert check_scores(request, StepScores(np.array([0.2, 0.7, 1.0]))) == [0.2, 0.7, 1.0]
    assert check_scores(request, StepScores([0.2, 0.7, 1.0]), new=1) == [1.0]
    # a step written in an earlier round is not checked again
    assert check_scores(request, StepScores(np.array([np.nan, 0.7, 0.4])), new=2) == [0.7, 0.4]


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (np.array([0.2, 0.5]), "scores for 3 steps"),  # one score short
        (np.array([[0.2], [0.3], [0.4]]), "scores for 3 steps"),  # a column, not one per step
        (np.array([0.2, 0.3, np.nan]), "probabilities"),
        (np.array([0.2, 0.3, 1.5]), "probabilities"),
        (np.array([0.2, 0.3, -0.1]), "probabilities"),
    ],
)
def test_a_malformed_reply_is_an_error_naming_what_is_wrong(scores, message):
    with pytest.raises(ValueError, match=message):
        check_scores(ScoreRequest("q", ("s0", "s1", "s2")), StepScores(scores), new=1)


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

    driver = Driver(*synthetic_backends(depth=3))
    job = Job(0, "q", make_strategy("beam", n=4), seed=11)
    nodes = [0] * 2 + list(range(1, rounds))  # only the root exists; check_expand is not run here
    job.tree.add_steps([0] * rounds, ["s"] * rounds, [()] * rounds, [0.0] * rounds, ["step"] * rounds)
    first = driver.generation_requests(job, Expand(tuple((node, 1) for node in nodes)))
    again = driver.generation_requests(job, Expand(((0, 1),)))
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
