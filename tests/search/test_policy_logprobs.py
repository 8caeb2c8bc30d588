"""The driver asks the policy for log-probabilities only when the strategy or scorer reads them
(a server's log-softmax over the vocabulary costs about a tenth of its tokens/s)."""

from __future__ import annotations

import math

import pytest
from helpers import synthetic_backends

from prmsearch import Searcher
from prmsearch.planner.plan import DEFAULT_PLAN
from prmsearch.policies.base import Finish, GenerationRequest
from prmsearch.policies.vllm_output import step_output
from prmsearch.scorers.confidence import PolicyLogprobScorer
from prmsearch.search.driver import RunConfig
from prmsearch.search.protocol import make_strategy


class AskedFor:
    """Wraps a policy and records each request's ``logprobs`` flag."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.flags: list[bool] = []

    @property
    def num_parameters(self) -> int:
        return self.policy.num_parameters

    def generate(self, requests: list[GenerationRequest]):
        self.flags.extend(r.logprobs for r in requests)
        return self.policy.generate(requests)


def _flags(strategy: str, scorer=None, **options) -> set[bool]:
    policy, synthetic_scorer = synthetic_backends(depth=3)
    recorder = AskedFor(policy)
    searcher = Searcher(recorder, scorer or synthetic_scorer, strategy, **options)
    results = searcher.run(["problem 0", "problem 1"])
    assert all(r.error is None for r in results), [r.error for r in results]
    return set(recorder.flags)


@pytest.mark.parametrize("strategy,options", [
    ("beam", {"n": 8, "width": 4}),
    ("particle_filter", {"n": 8}),
    ("best_of_n", {"n": 4}),
    ("self_consistency", {"n": 4}),
    ("mcts", {"n": 8}),  # the uniform prior reads none
])
def test_strategies_that_read_no_logprobs_ask_for_none(strategy, options):
    assert _flags(strategy, **options) == {False}


@pytest.mark.parametrize("strategy,options", [
    ("mcts", {"n": 8, "prior": "policy"}),
    ("confidence_vote", {"n": 4}),
])
def test_strategies_that_read_logprobs_ask_for_them(strategy, options):
    assert _flags(strategy, **options) == {True}


def test_a_scorer_that_reads_logprobs_gets_them_for_any_strategy():
    assert _flags("beam", PolicyLogprobScorer(), n=8, width=4) == {True}


def test_always_asks_on_every_request():
    assert _flags("beam", n=8, width=4, policy_logprobs="always") == {True}


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="policy_logprobs must be one of"):
        RunConfig(policy_logprobs="sometimes")


def test_the_planner_reads_logprobs_when_an_arm_does():
    assert not make_strategy("planner", n=8).needs_logprobs
    plan = {**DEFAULT_PLAN, "levels": [
        {"n": 8, "arms": [{"strategy": "confidence_vote", "budget": 16},
                          *DEFAULT_PLAN["levels"][1]["arms"][1:]]},
    ]}
    assert make_strategy("planner", n=8, plan=plan).needs_logprobs


class _Tokenizer:
    """Decodes ids as characters (``ord``), enough for step cutting."""

    def decode(self, ids, **_):
        return "".join(chr(i) for i in ids)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def test_a_sample_without_logprobs_is_cut_the_same_and_has_nan():
    ids = [ord(c) for c in "1 + 2 = 3\n\nnext"]
    with_lps = step_output(_Tokenizer(), ids, [-0.5] * len(ids), stopped=True, eos_ids=(),
                           stop_at_step=True, delimiter="\n\n")
    without = step_output(_Tokenizer(), ids, None, stopped=True, eos_ids=(), stop_at_step=True,
                          delimiter="\n\n")
    assert (without.text, without.token_ids, without.finish) == \
        (with_lps.text, with_lps.token_ids, with_lps.finish) == ("1 + 2 = 3", tuple(ids[:9]), Finish.STEP)
    assert with_lps.logprob == pytest.approx(-4.5)
    assert math.isnan(without.logprob) and without.token_logprobs == ()
