"""Adaptive compute: adaptive_vote, confidence_vote and the PRM-guided early stop of the tree
searches, on scripted backends: when each stops, and what the ledger charges for it."""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest
from helpers import run_one, synthetic_backends

from prmsearch.conformance import check_strategy
from prmsearch.policies.base import Finish
from prmsearch.policies.scripted import ScriptedPolicy, ScriptedStep
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import make_strategy, strategy_names
from prmsearch.search.strategies.confidence_vote import (
    group_confidence,
    path_token_logprobs,
    step_confidence,
    trace_confidence,
)
from prmsearch.search.strategies.early_stop import (
    StopRule,
    beta_cdf,
    leader_probability,
    round_sizes,
    settled,
)
from prmsearch.tree import ROOT, SearchTree

# -- the stopping rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "second"), [(0, 0), (2, 0), (4, 0), (3, 1), (5, 3), (7, 7), (12, 2), (30, 20)]
)
def test_beta_rule_is_the_exact_binomial_tail_for_counts(top, second):
    """For counts, P(p > 1/2) under Beta(v1 + 1, v2 + 1) is P(Binomial(v1 + v2 + 1, 1/2) <= v1)."""
    trials = top + second + 1
    exact = sum(comb(trials, j) for j in range(top + 1)) / 2**trials
    assert math.isclose(leader_probability(top, second), exact, rel_tol=1e-9, abs_tol=1e-12)


def test_beta_cdf_is_symmetric_and_monotone_for_real_weights():
    for a, b in [(0.5, 2.5), (3.7, 1.2), (40.0, 55.5)]:
        for x in (0.1, 0.5, 0.9):
            assert math.isclose(beta_cdf(x, a, b), 1 - beta_cdf(1 - x, b, a), abs_tol=1e-12)
    values = [leader_probability(w, 0.5) for w in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert values == sorted(values) and math.isclose(values[0], 0.5)
    with pytest.raises(ValueError, match="a > 0 and b > 0"):
        beta_cdf(0.5, 0.0, 1.0)


def test_unanimous_votes_settle_the_beta_rule_at_four_not_two():
    assert not settled(2, 0, 2, StopRule.BETA, 0.95)  # 7/8
    assert settled(4, 0, 4, StopRule.BETA, 0.95)  # 31/32
    assert not settled(6, 2, 8, StopRule.BETA, 0.95)
    assert settled(3, 1, 4, StopRule.MAJORITY, 0.75) and not settled(3, 1, 4, StopRule.MAJORITY, 0.8)
    assert not settled(16, 0, 16, StopRule.NONE, 0.95)
    assert not settled(0, 0, 0, StopRule.MAJORITY, 0.9)  # no votes is never settled


def test_round_sizes_grow_and_add_up_to_the_budget():
    assert round_sizes(16, 2, 2.0) == [2, 2, 4, 8]
    assert round_sizes(12, 2, 2.0) == [2, 2, 4, 4]
    assert round_sizes(5, 1, 1.0) == [1, 1, 1, 1, 1]
    assert round_sizes(1, 2, 2.0) == [1]
    assert round_sizes(10, 3, 1.5) == [3, 2, 3, 2]  # totals 3, 5, 8, 10
    for n in range(1, 40):
        assert sum(round_sizes(n, 3, 1.7)) == n


# -- adaptive_vote --------------------------------------------------------------------------------


def easy(question, steps, index, seed):
    """Every sample agrees."""
    return "so \\boxed{5}"


def split(question, steps, index, seed):
    """Every request splits evenly between two answers."""
    return "a \\boxed{5}" if index % 2 == 0 else "b \\boxed{7}"


class CountingScorer(ScriptedScorer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests = 0

    def score(self, requests):
        self.requests += len(requests)
        return super().score(requests)


def test_adaptive_vote_stops_early_on_an_easy_question():
    policy, scorer = ScriptedPolicy(easy), CountingScorer({})
    result, _ = run_one(policy, scorer, make_strategy("adaptive_vote", n=16))
    assert result.answer == "5"
    assert result.ledger.generations == 4 < 16  # rounds of 2 and 2: 4-0 settles the Beta rule
    assert policy.calls == [1, 1]
    assert len(result.candidates) == 4
    assert scorer.requests == 0 and result.ledger.prm_calls == 0 and result.ledger.prm_flops == 0


def test_adaptive_vote_spends_the_whole_budget_on_a_split_vote():
    policy = ScriptedPolicy(split)
    result, _ = run_one(policy, ScriptedScorer({}), make_strategy("adaptive_vote", n=16))
    assert result.ledger.generations == 16
    assert policy.calls == [1, 1, 1, 1]  # rounds of 2, 2, 4, 8
    assert {v.answer: v.count for v in result.votes} == {"5": 8, "7": 8}
    assert result.answer == "5"  # the tie breaks on the earliest sample, as in self-consistency


def test_adaptive_vote_charges_fewer_tokens_and_flops_than_self_consistency_when_it_stops():
    adaptive, _ = run_one(ScriptedPolicy(easy), ScriptedScorer({}), make_strategy("adaptive_vote", n=16))
    full, _ = run_one(ScriptedPolicy(easy), ScriptedScorer({}), make_strategy("self_consistency", n=16))
    assert full.ledger.generations == 16 and adaptive.ledger.generations == 4
    assert adaptive.ledger.generated_tokens * 4 == full.ledger.generated_tokens
    assert adaptive.ledger.policy_flops < full.ledger.policy_flops
    assert adaptive.answer == full.answer


def test_adaptive_vote_schedule_and_rules_are_options():
    policy = ScriptedPolicy(easy)
    result, _ = run_one(policy, ScriptedScorer({}), make_strategy("adaptive_vote", n=16, first=1, growth=1))
    assert result.ledger.generations == 4 and policy.calls == [1, 1, 1, 1]  # one at a time, 4-0 settles
    policy = ScriptedPolicy(easy)
    unanimous = make_strategy("adaptive_vote", n=16, rule="majority", threshold=1.0)
    result, _ = run_one(policy, ScriptedScorer({}), unanimous)
    assert result.ledger.generations == 2  # 2 of 2 agree: a supermajority of 100%
    policy = ScriptedPolicy(easy)
    result, _ = run_one(policy, ScriptedScorer({}), make_strategy("adaptive_vote", n=16, rule="none"))
    assert result.ledger.generations == 16 and policy.calls == [1]  # plain self-consistency


def test_weighted_adaptive_vote_settles_on_prm_weights_when_counts_are_split():
    scores = {"a \\boxed{5}": 0.99, "b \\boxed{7}": 0.01}
    plain, _ = run_one(ScriptedPolicy(split), ScriptedScorer(scores), make_strategy("adaptive_vote", n=16))
    weighted_strategy = make_strategy("adaptive_vote", n=16, selection="weighted")
    assert weighted_strategy.needs_scores and not make_strategy("adaptive_vote").needs_scores
    scorer = CountingScorer(scores)
    weighted, _ = run_one(ScriptedPolicy(split), scorer, weighted_strategy)
    assert plain.ledger.generations == 16
    # weights 3.96 against 0.04 after 8 samples: P(leader is the majority) = 0.966 >= 0.95
    assert weighted.ledger.generations == 8 and weighted.answer == "5"
    assert scorer.requests == 8 and weighted.ledger.prm_calls > 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"selection": "argmax"}, "selection must be majority or weighted"),
        ({"threshold": 1.0}, "threshold must be in \\(0.5, 1\\) with rule=beta"),
        ({"rule": "majority", "threshold": 0.4}, "threshold must be in \\(0.5, 1\\] with rule=majority"),
        ({"rule": "sometimes"}, "rule must be one of none, beta, majority"),
        ({"first": 0}, "first must be an int >= 1"),
        ({"growth": 0.5}, "growth must be a number >= 1"),
    ],
)
def test_adaptive_vote_options_are_validated(options, message):
    with pytest.raises(ValueError, match=message):
        make_strategy("adaptive_vote", **options)


# -- confidence_vote ------------------------------------------------------------------------------


def test_trace_confidence_is_the_lowest_step_mean_logprob():
    tree = SearchTree("q")
    a = tree.add_node(ROOT, "one two", (1, 2), -3.0)  # mean -1.5: the weakest step
    b = tree.add_node(a, "three four five six", (3, 4, 5, 6), -4.0)  # mean -1.0
    c = tree.add_node(b, "\\boxed{1}", (7,), -0.25)
    assert step_confidence(tree, b) == -1.0 and math.isnan(step_confidence(tree, ROOT))
    assert trace_confidence(tree, c) == -1.5 and trace_confidence(tree, b) == -1.5
    # a whole solution: the inner steps of its chain hold no tokens, the last holds them all
    first = tree.add_node(ROOT, "x", (), 0.0)
    last = tree.add_node(first, "y \\boxed{2}", (1, 2, 3, 4, 5, 6, 7), -3.5)
    assert trace_confidence(tree, last) == -0.5  # the mean over the whole solution
    assert trace_confidence(tree, tree.add_node(ROOT, "", (), 0.0)) == -math.inf


def test_group_confidence_is_the_lowest_window_mean():
    values = [-0.5, -0.5, -0.1, -3.0, -0.1, -0.1]
    assert group_confidence(values, 1) == pytest.approx(-3.0)  # every token its own group
    assert group_confidence(values, 2) == pytest.approx(-1.55)  # (-0.1 - 3.0) / 2, either side
    assert group_confidence(values, 3) == pytest.approx(-1.2)  # (-0.5 - 0.1 - 3.0) / 3
    mean = sum(values) / len(values)
    assert group_confidence(values, 6) == pytest.approx(mean)  # the window is the whole trace
    assert group_confidence(values, 100) == pytest.approx(mean)  # a shorter trace is one group
    assert group_confidence([], 4) == -math.inf
    assert group_confidence([-0.1, -math.inf, -0.1], 2) == -math.inf


def token_tree() -> tuple[SearchTree, int, int, int]:
    """A step-by-step trace whose weak spot straddles two steps, a whole solution, and a trace one
    of whose steps has tokens but no per-token values."""
    tree = SearchTree("q")
    a = tree.add_node(ROOT, "a b", (1, 2), -1.0, token_logprobs=(-0.5, -0.5))
    b = tree.add_node(a, "c d e f", (3, 4, 5, 6), -3.3, token_logprobs=(-0.1, -3.0, -0.1, -0.1))
    first = tree.add_node(ROOT, "x", (), 0.0)  # a whole solution: its chain's last node holds the tokens
    whole = tree.add_node(first, "y \\boxed{2}", (1, 2, 3, 4), -2.0, "eos", (-0.2, -0.2, -1.5, -0.1))
    bare = tree.add_node(b, "g", (7,), -2.0)  # a backend that gave no per-token values
    return tree, b, whole, bare


def test_trace_confidence_slides_a_window_over_the_path_tokens():
    tree, b, whole, _ = token_tree()
    assert path_token_logprobs(tree, b) == [-0.5, -0.5, -0.1, -3.0, -0.1, -0.1]
    assert trace_confidence(tree, b, window=2) == pytest.approx(-1.55)
    assert trace_confidence(tree, b, window=3) == pytest.approx(-1.2)  # a window across the steps
    assert trace_confidence(tree, b, window=6) == pytest.approx(-4.3 / 6)  # window == trace
    assert trace_confidence(tree, b, window=50) == pytest.approx(-4.3 / 6)  # window > trace
    assert trace_confidence(tree, b) == pytest.approx(-4.3 / 6)  # the default 16 > 6 tokens
    # the step-level measure would say min(-1.0 / 2, -3.3 / 4) = -0.825 at every window
    assert trace_confidence(tree, whole, window=2) == pytest.approx(-0.85)
    assert trace_confidence(tree, whole, window=1) == pytest.approx(-1.5)


def test_trace_confidence_falls_back_to_steps_without_token_logprobs():
    tree, _, _, bare = token_tree()
    assert path_token_logprobs(tree, bare) is None
    for window in (1, 2, 16):  # the lowest step mean: -2.0 / 1 token, whatever the window
        assert trace_confidence(tree, bare, window) == -2.0
    assert trace_confidence(tree, tree.add_node(ROOT, "", (), 0.0), 2) == -math.inf


def test_the_scripted_policy_gives_token_logprobs_when_asked():
    from prmsearch.policies.base import GenerationRequest, StepOutput

    request = GenerationRequest("q", (), 4, stop_at_step=False)
    (plain,) = ScriptedPolicy(spiky_or_flat).generate([request])
    (given,) = ScriptedPolicy(spiky_or_flat, token_logprobs=True).generate([request])
    assert all(s.token_logprobs == () for s in plain.samples)  # the default: none, as before
    for a, s in zip(plain.samples, given.samples, strict=True):
        assert (s.text, s.token_ids, s.logprob, s.finish) == (a.text, a.token_ids, a.logprob, a.finish)
        assert len(s.token_logprobs) == len(s.token_ids) and math.isclose(sum(s.token_logprobs), s.logprob)
    assert given.samples[1].token_logprobs == (-0.05,) * 8 + (-3.0, -3.0)
    with pytest.raises(ValueError, match="one value per token"):
        StepOutput("a b", (1, 2), -1.0, Finish.STEP, (-1.0,))


def spiky_or_flat(question, steps, index, seed):
    """Every fourth sample answers 3 at a steady -1.0 per token; the others answer 4 after 8 sure
    tokens and 2 very unsure ones, so their whole-solution mean (-0.64) is the higher."""
    if index % 4 == 0:
        return ScriptedStep("so so so so \\boxed{3}", logprob=-5.0)
    if not steps:
        return ScriptedStep("w w w w w w w w", logprob=-0.4)
    return ScriptedStep("oops \\boxed{4}", logprob=-6.0)


@pytest.mark.parametrize(
    ("token_logprobs", "window", "answer"),
    [
        (True, 2, "3"),  # the unsure pair of tokens sinks the spiky traces
        (True, 16, "4"),  # 10 tokens < 16: one group, the whole-solution mean
        (False, 2, "4"),  # no per-token values: the step-level fallback, the same mean
    ],
)
def test_confidence_vote_ranks_traces_by_the_sliding_window(token_logprobs, window, answer):
    policy = ScriptedPolicy(spiky_or_flat, token_logprobs=token_logprobs)
    strategy = make_strategy("confidence_vote", n=16, keep=0.25, rule="none", window=window)
    result, _ = run_one(policy, ScriptedScorer({}), strategy)
    assert result.answer == answer
    assert [(v.answer, v.count) for v in result.votes] == [(answer, 4)]
    tokens = 10 if answer == "4" else 5  # on the node that ends each voter's chain, when given
    assert all(len(result.tree.token_logprobs[c.node]) == tokens * token_logprobs for c in result.candidates)


def doubtful_majority(question, steps, index, seed):
    """Confident samples answer 3; the more numerous unsure ones answer 4."""
    if index % 4 == 0:
        return ScriptedStep("sure \\boxed{3}", logprob=-0.2)
    return ScriptedStep("maybe \\boxed{4}", logprob=-6.0)


def test_confidence_filter_overrules_an_unsure_majority():
    self_consistency = make_strategy("self_consistency", n=16)
    sc, _ = run_one(ScriptedPolicy(doubtful_majority), ScriptedScorer({}), self_consistency)
    assert sc.answer == "4"
    scorer = CountingScorer({})
    strategy = make_strategy("confidence_vote", n=16, keep=0.25, rule="none")
    assert not strategy.needs_scores
    result, _ = run_one(ScriptedPolicy(doubtful_majority), scorer, strategy)
    assert result.answer == "3"
    assert result.ledger.generations == 16
    assert [(v.answer, v.count) for v in result.votes] == [("3", 4)]  # only the kept traces vote
    assert scorer.requests == 0 and result.ledger.prm_calls == 0 and result.ledger.prm_flops == 0


def test_confidence_weights_outweigh_a_count_majority():
    # per-token probabilities: exp(-0.1) for the sure traces, exp(-3.0) for the unsure ones:
    # 4 x 0.90 = 3.6 against 12 x 0.05 = 0.6
    strategy = make_strategy("confidence_vote", n=16, mode="weight", rule="none")
    result, _ = run_one(ScriptedPolicy(doubtful_majority), ScriptedScorer({}), strategy)
    assert result.answer == "3"
    assert len(result.candidates) == 16  # every answered trace votes


def test_confidence_vote_stops_once_the_confident_traces_agree():
    policy = ScriptedPolicy(easy)
    result, _ = run_one(policy, ScriptedScorer({}), make_strategy("confidence_vote", n=16))
    # rounds of 4 and 4: 2 kept of 4 (2-0) is not settled, 4 kept of 8 (4-0) is
    assert result.ledger.generations == 8 and policy.calls == [1, 1]
    assert result.answer == "5"
    split_policy = ScriptedPolicy(split)
    result, _ = run_one(split_policy, ScriptedScorer({}), make_strategy("confidence_vote", n=16))
    assert result.ledger.generations == 16 and split_policy.calls == [1, 1, 1]  # 4, 4, 8


def test_confidence_vote_without_answers_returns_the_most_confident_trace():
    def script(question, steps, index, seed):
        if not steps:
            return ScriptedStep(f"start {index}", logprob=-0.1)
        return ScriptedStep(f"gave up {index}", Finish.EOS, logprob=-1.0 - index)

    result, _ = run_one(ScriptedPolicy(script), ScriptedScorer({}), make_strategy("confidence_vote", n=4))
    assert result.answer is None
    assert result.ledger.generations == 4  # nothing to vote on: never settled
    assert result.steps == ("start 0", "gave up 0")


def wavering(question, steps, index, seed):
    """Three four-word steps, then an answer; a step is unsure (every token at -5, not -0.1) with
    probability 0.15, so some traces waver somewhere and most never do."""
    rng = np.random.default_rng([seed, index, len(steps)])
    unsure = rng.random() < 0.15
    if len(steps) == 3:
        return ScriptedStep("so \\boxed{3}" if unsure else "so \\boxed{7}", logprob=-10.0 if unsure else -0.2)
    word = "maybe" if unsure else "surely"
    return ScriptedStep(f"step {len(steps)} goes {word}", logprob=-20.0 if unsure else -0.4)


def online(**options):
    return make_strategy("confidence_vote", **{"n": 16, "first": 8, "window": 4, "rule": "none",
                                               "online_keep": 0.25, **options})


def test_online_confidence_drops_the_traces_that_waver_below_the_warm_up_bar():
    policy = ScriptedPolicy(wavering, token_logprobs=True)
    result, _ = run_one(policy, ScriptedScorer({}), online(), question="online one")
    tree = result.tree
    warm_up = [n for n in tree.terminals() if tree.depth[n] == 4 and not tree.token_ids[n - 1]]
    assert len(warm_up) == 8  # whole solutions: a chain whose tokens sit on its last node
    bar = float(np.quantile([trace_confidence(tree, n, 4) for n in warm_up], 0.75))
    assert result.report["threshold"] == pytest.approx(bar)
    # the other 8 grew one step per round; each either finished above the bar or was dropped
    online_roots = [c for c in tree.children(ROOT) if tree.token_ids[c]]
    assert len(online_roots) == 8
    dropped = result.report["abandoned"]
    assert dropped > 0
    voters = {c.node for c in result.candidates}
    for start in online_roots:
        node = start
        while tree.children(node):
            (node,) = tree.children(node)
        lowest = group_confidence(path_token_logprobs(tree, node), 4)
        if lowest < bar:  # dropped at its first window below the bar: it never grew past it
            assert node not in voters
            assert group_confidence(path_token_logprobs(tree, tree.parent[node]), 4) >= bar or \
                len(path_token_logprobs(tree, tree.parent[node])) < 4
        else:
            assert tree.terminal[node]
    # every generated step is charged; the dropped traces' steps too
    steps = sum(1 for n in range(1, len(tree)) if tree.token_ids[n])
    assert result.ledger.generations == steps
    assert policy.calls[0] == 1 and len(policy.calls) > 2  # the warm-up in one call, then step rounds


def test_online_confidence_saves_tokens_and_is_off_by_default():
    offline, _ = run_one(ScriptedPolicy(wavering, token_logprobs=True), ScriptedScorer({}),
                         online(online_keep=None), question="online one")
    assert offline.report == {} and offline.ledger.generations == 16
    dropped, _ = run_one(ScriptedPolicy(wavering, token_logprobs=True), ScriptedScorer({}), online(),
                         question="online one")
    assert dropped.ledger.generated_tokens < offline.ledger.generated_tokens
    # keeping everything (online_keep=1: the bar is the lowest warm-up confidence) drops less
    lenient, _ = run_one(ScriptedPolicy(wavering, token_logprobs=True), ScriptedScorer({}),
                         online(online_keep=1.0), question="online one")
    assert lenient.report["abandoned"] <= dropped.report["abandoned"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"online_keep": 0}, "online_keep must be None .* or a fraction in \\(0, 1\\]"),
        ({"online_keep": "high"}, "online_keep must be None"),
        ({"keep": 0}, "keep must be a fraction in \\(0, 1\\]"),
        ({"keep": 1.5}, "keep must be a fraction"),
        ({"mode": "vote"}, "mode must be one of filter, weight"),
        ({"threshold": 0.2}, "threshold must be in"),
        ({"window": 0}, "window must be an int >= 1 \\(tokens per confidence group\\), got 0"),
        ({"window": 2.5}, "window must be an int >= 1"),
        ({"window": True}, "window must be an int >= 1"),
    ],
)
def test_confidence_vote_options_are_validated(options, message):
    with pytest.raises(ValueError, match=message):
        make_strategy("confidence_vote", **options)


# -- the PRM-guided early stop of beam, DVTS and particle filtering -----------------------------

BEAM_SCRIPT = {
    (): ["A1", "A2", "A3", "A4"],
    ("A1",): ["B1", "B2"],
    ("A3",): ["B3 \\boxed{3}", "B4"],
    ("A1", "B2"): ["C1 \\boxed{1}", "C2 \\boxed{2}"],
}
BEAM_SCORES = {
    "A1": 0.9, "A2": 0.2, "A3": 0.8, "A4": 0.1, "B1": 0.5, "B2": 0.7,
    "B3 \\boxed{3}": 0.95, "B4": 0.3, "C1 \\boxed{1}": 0.6, "C2 \\boxed{2}": 0.4,
}


def test_beam_stops_when_a_finished_beam_scores_high_enough():
    def beam(**options):
        strategy = make_strategy("beam", n=4, width=2, aggregation="last", **options)
        return run_one(ScriptedPolicy(BEAM_SCRIPT), ScriptedScorer(BEAM_SCORES), strategy)[0]

    default, early = beam(), beam(stop_score=0.9)
    assert default.ledger.generations == 10
    assert early.ledger.generations == 8  # B3 (0.95) finished in round 2; B2 is not expanded
    assert early.answer == "3" and [c.node for c in early.candidates] == [early.node]
    assert beam(stop_score=0.96).ledger.generations == 10  # not good enough: the search goes on
    assert beam(stop_score=0.9, stop_agree=2).ledger.generations == 10  # no second "3" to agree


def dvts_script():
    calls = {"root": 0}

    def script(question, steps, index, seed):
        if not steps:
            calls["root"] += 1
            return ("G1 \\boxed{1}", "G2")[index] if calls["root"] <= 2 else ("H1", "H2")[index]
        return f"{steps[-1]} then \\boxed{{1}}"

    return ScriptedPolicy(script)


def test_dvts_stops_when_a_finished_subtree_scores_high_enough():
    scores = {"G1 \\boxed{1}": 0.95, "G2": 0.2, "H1": 0.6, "H2": 0.3}

    def dvts(**options):
        strategy = make_strategy("dvts", n=4, width=2, aggregation="last", **options)
        return run_one(dvts_script(), ScriptedScorer(scores, default=0.5), strategy)[0]

    default, early, agreeing = dvts(), dvts(stop_score=0.9), dvts(stop_score=0.9, stop_agree=2)
    assert default.ledger.generations == 6 and len(default.candidates) == 2
    assert early.ledger.generations == 4 and early.answer == "1"  # subtree H1 is abandoned
    assert agreeing.ledger.generations == 6  # waits for the second subtree to agree


def test_particle_filter_stops_when_finished_particles_score_high_enough():
    script = {(): ["good \\boxed{1}", "close"], ("close",): ["c \\boxed{2}"]}
    scores = {"good \\boxed{1}": 0.95, "close": 0.9, "c \\boxed{2}": 0.9}

    def pf(**options):
        strategy = make_strategy("particle_filter", n=4, **options)
        return run_one(ScriptedPolicy(script), ScriptedScorer(scores), strategy, seed=3)[0]

    default, early = pf(), pf(stop_score=0.9)
    assert default.ledger.generations > 4  # resampled "close" particles are extended
    assert early.ledger.generations == 4 and early.answer == "1"
    assert pf(stop_score=0.9, stop_agree=3).ledger.generations == default.ledger.generations


@pytest.mark.parametrize("name", ["beam", "dvts", "particle_filter"])
def test_early_stop_is_off_by_default_and_an_unreached_score_changes_nothing(name):
    default = run_one(*synthetic_backends(), make_strategy(name, n=8), seed=5)[0]
    assert make_strategy(name).config.stop_score is None
    never = run_one(*synthetic_backends(), make_strategy(name, n=8, stop_score=1.0), seed=5)[0]
    assert never.tree == default.tree and never.node == default.node
    assert never.ledger.generations == default.ledger.generations


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("beam", {"stop_agree": 2}, "stop_agree=2 has no effect without stop_score"),
        ("beam", {"stop_score": 0.9, "stop_agree": 5}, "stop_agree must be <= 4"),
        ("dvts", {"stop_score": 1.5}, "stop_score must be None .* or a PRM score in \\[0, 1\\]"),
        ("dvts", {"stop_score": 0.9, "stop_agree": 0}, "stop_agree must be an int >= 1"),
        ("particle_filter", {"n": 4, "stop_score": 0.9, "stop_agree": 5}, "stop_agree must be <= 4"),
    ],
)
def test_early_stop_options_are_validated(name, options, message):
    with pytest.raises(ValueError, match=message):
        make_strategy(name, **options)


# -- registration and conformance -----------------------------------------------------------------


def test_new_strategies_are_registered():
    assert {"adaptive_vote", "confidence_vote"} <= set(strategy_names())


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("adaptive_vote", {"n": 8, "selection": "weighted", "aggregation": "last"}),
        ("adaptive_vote", {"n": 5, "rule": "majority", "threshold": 0.8, "first": 1, "growth": 1}),
        ("adaptive_vote", {"n": 1}),
        ("confidence_vote", {"n": 8, "mode": "weight", "rule": "majority", "threshold": 0.9}),
        ("confidence_vote", {"n": 6, "keep": 1.0, "rule": "none"}),
        ("beam", {"n": 8, "width": 2, "stop_score": 0.5, "stop_agree": 2}),
        ("dvts", {"n": 8, "width": 2, "stop_score": 0.3}),
        ("particle_filter", {"n": 6, "stop_score": 0.5, "stop_agree": 2}),
    ],
)
def test_adaptive_options_conform(name, options):
    check_strategy(name, **options)
