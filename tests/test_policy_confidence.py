"""Policy confidence: three readings of the policy's token log-probabilities, and the free scorer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prmsearch.scorers.base import ScoreRequest
from prmsearch.scorers.confidence import PolicyLogprobScorer, confidence_scores, policy_confidence

LPS = ((math.log(0.5), math.log(0.5)), (), (math.log(0.9),))


def test_mean_is_the_geometric_mean_probability_of_the_path_so_far():
    scores = confidence_scores(LPS, "mean")
    np.testing.assert_allclose(scores, [0.5, 0.5, (0.5 * 0.5 * 0.9) ** (1 / 3)])


def test_min_is_the_running_lowest_token_probability():
    np.testing.assert_allclose(confidence_scores(LPS, "min"), [0.5, 0.5, 0.5])


def test_last_reads_the_step_alone_and_an_empty_step_keeps_the_previous_score():
    np.testing.assert_allclose(confidence_scores(LPS, "last"), [0.5, 0.5, 0.9])
    np.testing.assert_allclose(confidence_scores(((), ()), "last"), [1.0, 1.0])


def test_an_unknown_aggregation_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"aggregation must be one of \['mean', 'min', 'last'\]"):
        PolicyLogprobScorer(aggregation="max")


def test_the_free_scorer_reads_the_requests_log_probabilities_and_costs_nothing():
    scorer = policy_confidence()
    assert isinstance(scorer, PolicyLogprobScorer) and scorer.reads_policy_logprobs
    (out,) = scorer.score([ScoreRequest("q", ("a", "b", "c"), LPS)])
    assert out.tokens_computed == 0 and len(out.scores) == 3


def test_the_free_scorer_without_log_probabilities_names_the_fix():
    with pytest.raises(ValueError, match=r"request 0: .* give the scorer a model"):
        policy_confidence().score([ScoreRequest("q", ("a",))])


def test_in_a_search_the_driver_hands_the_scorer_the_policys_log_probabilities():
    from prmsearch.api import Searcher, resolve_policy

    searcher = Searcher(resolve_policy(None), policy_confidence(), "beam", n=4, width=2, seed=0)
    result = searcher("Start with 7. Add 5. Multiply by 3. Subtract 6. What is the result?")
    assert result.error is None and result.steps
    assert all(0.0 < s <= 1.0 for s in result.step_scores)
    assert result.ledger.prm_tokens_computed == 0 and result.ledger.prm_flops == 0
