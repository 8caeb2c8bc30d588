"""Exact behaviour of every strategy on scripted step trees with fixed scores."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from helpers import run_one, synthetic_backends

from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import make_strategy
from prmsearch.search.strategies.particle_filter import Resampling, particle_weights, resample
from prmsearch.search.strategies.rebase import balanced_counts
from prmsearch.tree import ROOT

BEAM_SCRIPT = {
    (): ["A1", "A2", "A3", "A4"],
    ("A1",): ["B1", "B2"],
    ("A3",): ["B3 \\boxed{3}", "B4"],
    ("A1", "B2"): ["C1 \\boxed{1}", "C2 \\boxed{2}"],
}
BEAM_SCORES = {
    "A1": 0.9,
    "A2": 0.2,
    "A3": 0.8,
    "A4": 0.1,
    "B1": 0.5,
    "B2": 0.7,
    "B3 \\boxed{3}": 0.95,
    "B4": 0.3,
    "C1 \\boxed{1}": 0.6,
    "C2 \\boxed{2}": 0.4,
}


def texts(tree, nodes):
    return [tree.step_text[n] for n in nodes]


def test_beam_keeps_the_n_over_width_best_and_retires_finished_beams():
    policy, scorer = ScriptedPolicy(BEAM_SCRIPT), ScriptedScorer(BEAM_SCORES)
    beam = make_strategy("beam", n=4, width=2, aggregation="last")
    result, _driver = run_one(policy, scorer, beam)
    tree = result.tree
    # step 1: the root gets n=4 children; A1 and A3 survive and get width=2 each
    assert texts(tree, tree.children(ROOT)) == ["A1", "A2", "A3", "A4"]
    assert [len(tree.children(n)) for n in tree.children(ROOT)] == [2, 0, 2, 0]
    # step 2: B3 (terminal) and B2 are the 2 best; B3 retires a beam, B2 continues alone
    b2 = tree.children(1)[1]
    assert texts(tree, tree.children(b2)) == ["C1 \\boxed{1}", "C2 \\boxed{2}"]
    assert tree.children(tree.children(1)[0]) == []
    assert result.answer == "3"
    assert texts(tree, [result.node]) == ["B3 \\boxed{3}"]
    assert [v.answer for v in result.votes] == ["3", "1"]
    assert policy.calls == [1, 2, 1]  # one batched policy call per round
    assert result.ledger.generations == 4 + 4 + 2


def test_beam_ranks_by_the_chosen_aggregation():
    policy, scorer = ScriptedPolicy(BEAM_SCRIPT), ScriptedScorer(BEAM_SCORES)
    beam = make_strategy("beam", n=4, width=2, aggregation="min")
    result, _ = run_one(policy, scorer, beam)
    # min along the path: A3-B3 = 0.8, A1-B2 = 0.7 -> still B3, and C1 path = min(.9,.7,.6) = .6
    assert result.answer == "3"
    assert math.isclose(result.score, 0.8)


def test_distinct_beams_rank_a_repeated_step_behind_every_different_one():
    # the root's four samples hold A1 twice (once with other spacing); A1 scores best
    script = {
        (): ["A1", "A2", " A1 ", "A3"],
        **{(first,): [f"{first.strip()} \\boxed{{{k}}}" for k in (1, 2)]
           for first in ("A1", " A1 ", "A2", "A3")},
    }
    scores = {"A1": 0.9, " A1 ": 0.9, "A2": 0.5, "A3": 0.2}
    plain = make_strategy("beam", n=4, width=2, aggregation="last")
    tree = run_one(ScriptedPolicy(script), ScriptedScorer(scores), plain)[0].tree
    kept = [node for node in tree.children(ROOT) if tree.children(node)]
    assert texts(tree, kept) == ["A1", " A1 "]  # two beams on one path
    distinct = make_strategy("beam", n=4, width=2, aggregation="last", distinct=True)
    tree = run_one(ScriptedPolicy(script), ScriptedScorer(scores), distinct)[0].tree
    kept = [node for node in tree.children(ROOT) if tree.children(node)]
    assert texts(tree, kept) == ["A1", "A2"]  # the copy's slot goes to the next different path
    same = {(): ["A1", "A1", "A1", "A1"], ("A1",): ["A1 \\boxed{1}", "A1 \\boxed{2}"]}
    tree = run_one(ScriptedPolicy(same), ScriptedScorer(scores), distinct)[0].tree
    kept = [node for node in tree.children(ROOT) if tree.children(node)]
    assert texts(tree, kept) == ["A1", "A1"]  # no different path: copies fill the beams
    assert make_strategy("beam", n=4, width=2, distinct="yes").config.distinct is True
    with pytest.raises(ValueError, match="distinct"):
        make_strategy("beam", n=4, width=2, distinct="sometimes")


def test_dvts_subtrees_are_independent():
    script = {(): ["G1", "G2"], **{(s,): [f"{s} \\boxed{{{s}}}"] for s in ("G1", "G2")}}
    counter = {"calls": 0}

    def script_fn(question, steps, index, seed):
        if not steps:
            counter["calls"] += 1
            return script[()][index] if counter["calls"] <= 2 else f"H{index}"
        return script[steps][0] if steps in script else f"{steps[0]} \\boxed{{{steps[0]}}}"

    scores = {"G1": 0.9, "G2": 0.8, "H0": 0.3, "H1": 0.2}
    policy = ScriptedPolicy(script_fn)
    dvts = make_strategy("dvts", n=4, width=2, aggregation="last")
    result, _ = run_one(policy, ScriptedScorer(scores, default=0.5), dvts)
    tree = result.tree
    first_round = tree.children(ROOT)
    assert texts(tree, first_round) == ["G1", "G2", "H0", "H1"]
    # beam would keep G1 and G2 (both from subtree 1); DVTS keeps the best of each subtree
    expanded = [n for n in first_round if tree.children(n)]
    assert texts(tree, expanded) == ["G1", "H0"]
    assert len(result.votes) == 2


def test_mcts_visit_counts_and_backed_up_values():
    script = {
        (): ["X", "Y"],
        ("X",): ["X1", "X2 \\boxed{2}"],
    }
    scores = {"X": 0.8, "Y": 0.4, "X1": 0.9, "X2 \\boxed{2}": 0.1}
    mcts = make_strategy("mcts", n=4, expansion_width=2, c_puct=1.0, rollout=False)
    result, _ = run_one(ScriptedPolicy(script), ScriptedScorer(scores), mcts)
    tree = result.tree
    x, y = tree.children(ROOT)
    x1, x2 = tree.children(x)
    assert tree.visits[ROOT] == 4 and tree.visits[x] == 3 and tree.visits[y] == 1
    assert tree.visits[x1] == 1 and tree.visits[x2] == 1
    assert math.isclose(tree.value_sum[ROOT], 0.8 + 0.4 + 0.9 + 0.1)
    assert math.isclose(tree.value_sum[x], 0.8 + 0.9 + 0.1)
    # most-visited descent ends at X1 (not terminal): fall back to the best finished solution
    assert result.node == x2 and result.answer == "2"
    assert result.ledger.generations == 4


def test_mcts_spreads_parallel_leaves_with_virtual_loss():
    policy, scorer = synthetic_backends(depth=4)
    mcts = make_strategy("mcts", n=32, expansion_width=2, leaves_per_round=4, rollout=False)
    result, _driver = run_one(policy, scorer, mcts)
    assert result.ledger.generations == 32
    assert max(policy.calls) > 1  # several leaves expanded in one round
    tree = result.tree
    assert tree.visits[ROOT] == len(tree) - 1  # virtual losses were all reverted


def test_mcts_rollouts_finish_solutions_within_a_small_budget():
    policy, scorer = synthetic_backends(depth=6)
    without, _ = run_one(policy, scorer, make_strategy("mcts", n=16, expansion_width=4, rollout=False))
    assert without.answer is None  # 3 expansions of one step each cannot reach depth 6
    result, _ = run_one(*synthetic_backends(depth=6), make_strategy("mcts", n=15, expansion_width=4))
    assert result.answer is not None
    assert result.ledger.generations == 15  # 3 x (4 expansion samples + 1 rollout)
    tree = result.tree
    rollout_starts = [n for n in tree.iter_nodes() if n and tree.depth[n] >= 2 and not tree.visits[n]]
    assert rollout_starts  # rollout chains hang below the searched nodes, unvisited
    assert tree.visits[0] == 12 + 3  # 12 expanded children and 3 rollouts backed up


@pytest.mark.parametrize(("n", "width"), [(1, 4), (2, 1), (4, 4), (6, 4)])
def test_mcts_spends_every_budget_on_finished_solutions(n, width):
    """A budget too small for a step plus a rollout still ends in a sampled whole solution."""
    policy, scorer = synthetic_backends(depth=6)
    result, _ = run_one(policy, scorer, make_strategy("mcts", n=n, expansion_width=width))
    assert result.answer is not None
    assert result.ledger.generations == n


def test_particle_weights_are_softmax_of_logits():
    weights = particle_weights(np.array([0.5, 0.8]), temperature=1.0)
    np.testing.assert_allclose(weights, [0.2, 0.8])
    np.testing.assert_allclose(particle_weights(np.array([0.5, 0.8]), 2.0), [1 / 3, 2 / 3])


def test_resampling_frequencies_follow_the_weights():
    weights = np.array([0.5, 0.3, 0.2])
    draws = resample(weights, 100_000, Resampling.MULTINOMIAL, np.random.default_rng(0))
    freq = np.bincount(draws, minlength=3) / draws.size
    np.testing.assert_allclose(freq, weights, atol=0.01)
    counts = np.bincount(resample(weights, 10, Resampling.SYSTEMATIC, np.random.default_rng(1)), minlength=3)
    assert counts.tolist() == [5, 3, 2]


def test_multinomial_resampling_draws_what_rng_choice_draws():
    # resample skips rng.choice's checks of p but must keep its draws: a seed's run stays the same
    rng = np.random.default_rng(3)
    for trial in range(200):
        scores = rng.uniform(0.0, 1.0, 16)
        scores[rng.random(16) < 0.2] = np.nan
        weights = particle_weights(scores, temperature=[0.5, 1.0, 2.0][trial % 3])
        ours = resample(weights, 16, Resampling.MULTINOMIAL, np.random.default_rng(trial))
        theirs = np.random.default_rng(trial).choice(16, size=16, p=weights)
        assert ours.tolist() == theirs.tolist()


def test_particle_weights_treat_unscored_as_nearly_zero():
    weights = particle_weights(np.array([np.nan, 0.5, 1.0, 0.0]), temperature=1.0)
    assert np.isfinite(weights).all() and weights.sum() == pytest.approx(1.0)
    assert weights[2] > 0.99 and weights[0] == pytest.approx(weights[3])
    assert particle_weights(np.array([np.nan, np.nan]), 1.0).tolist() == [0.5, 0.5]


def test_particle_filter_is_reproducible_and_resamples_toward_high_scores():
    script = {(): ["good", "bad"], ("good",): ["g \\boxed{1}"], ("bad",): ["b \\boxed{2}"]}
    scores = {"good": 0.95, "bad": 0.05, "g \\boxed{1}": 0.9, "b \\boxed{2}": 0.1}
    pf = make_strategy("particle_filter", n=8)
    runs = [run_one(ScriptedPolicy(script), ScriptedScorer(scores), pf, seed=7)[0] for _ in range(2)]
    assert runs[0].tree == runs[1].tree
    tree = runs[0].tree
    second = [n for n in tree.iter_nodes() if tree.depth[n] == 2]
    answers = Counter(tree.answer[n] for n in second)
    assert answers["1"] > answers["2"]
    assert runs[0].answer == "1"


def test_rebase_counts_add_up_and_favour_high_scores():
    counts = balanced_counts(np.array([0.9, 0.5, 0.1]), 10, temperature=0.2)
    assert counts.sum() == 10 and counts[0] > counts[1] >= counts[2]
    policy, scorer = synthetic_backends(depth=3)
    result, _ = run_one(policy, scorer, make_strategy("rebase", n=8))
    assert len(result.tree.terminals()) >= 8 or result.ledger.generations >= 8
    assert result.answer is not None


@pytest.mark.parametrize(
    ("name", "expected"),
    [("best_of_n", "7"), ("self_consistency", "5"), ("weighted_vote", "7")],
)
def test_vote_tallies(name, expected):
    solutions = ["a \\boxed{5}", "b \\boxed{5}", "c \\boxed{5}", "d \\boxed{7}", "e \\boxed{7.0}"]
    scores = {
        "a \\boxed{5}": 0.1,
        "b \\boxed{5}": 0.1,
        "c \\boxed{5}": 0.1,
        "d \\boxed{7}": 0.9,
        "e \\boxed{7.0}": 0.8,
    }
    strategy = make_strategy(name, n=5)
    result, _ = run_one(ScriptedPolicy({(): solutions}), ScriptedScorer(scores), strategy)
    assert result.answer == expected
    tallies = {v.answer: (v.count, round(v.weight, 6)) for v in result.votes}
    if name == "self_consistency":  # PRM-free: nothing was scored, so the votes weigh nothing
        assert tallies == {"5": (3, 0.0), "7": (2, 0.0)}
    else:
        assert tallies == {"5": (3, 0.3), "7": (2, 1.7)}  # "7" and "7.0" vote together


class CountingScorer(ScriptedScorer):
    """A scripted scorer that counts the requests it is asked to score."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests = 0

    def score(self, requests):
        self.requests += len(requests)
        return super().score(requests)


@pytest.mark.parametrize(
    ("name", "options", "scored"),
    [
        ("greedy", {}, False),
        ("self_consistency", {"n": 4}, False),
        ("best_of_n", {"n": 4, "selection": "majority"}, False),
        ("best_of_n", {"n": 4}, True),
        ("weighted_vote", {"n": 4}, True),
        ("beam", {"n": 4, "width": 2}, True),
    ],
)
def test_prm_free_strategies_are_never_scored_nor_charged(name, options, scored):
    solutions = ["a \\boxed{5}", "b \\boxed{7}", "c \\boxed{5}", "d \\boxed{7}"]
    scorer = CountingScorer({s: 0.5 for s in solutions})
    strategy = make_strategy(name, **options)
    assert strategy.needs_scores is scored
    result, _ = run_one(ScriptedPolicy({(): solutions}), scorer, strategy)
    assert (scorer.requests > 0) is scored
    assert (result.ledger.prm_calls > 0) is scored
    assert (result.ledger.prm_tokens_computed > 0) is scored and (result.ledger.prm_flops > 0) is scored
    if not scored:
        assert all(s != s for s in result.step_scores)  # NaN: never scored


def test_majority_ties_break_on_the_earliest_sample_not_on_a_score():
    # 2-2 tie; the PRM would prefer "7" (0.9), but self-consistency reads no score
    solutions = ["a \\boxed{5}", "b \\boxed{7}", "c \\boxed{5}", "d \\boxed{7}"]
    scores = {"a \\boxed{5}": 0.1, "b \\boxed{7}": 0.9, "c \\boxed{5}": 0.1, "d \\boxed{7}": 0.9}
    strategy = make_strategy("self_consistency", n=4)
    result, _ = run_one(ScriptedPolicy({(): solutions}), ScriptedScorer(scores), strategy)
    assert result.answer == "5"


def test_whole_solutions_become_chains_of_scored_steps():
    script = {(): ["s1"], ("s1",): ["s2"], ("s1", "s2"): ["\\boxed{4}"]}
    result, _ = run_one(
        ScriptedPolicy(script),
        ScriptedScorer({"s1": 0.3, "s2": 0.6, "\\boxed{4}": 0.9}),
        make_strategy("best_of_n", n=2),
    )
    assert result.steps == ("s1", "s2", "\\boxed{4}")
    assert result.step_scores == (0.3, 0.6, 0.9)
    assert result.answer == "4"
    assert math.isclose(result.score, 0.3)  # min aggregation by default


def test_same_seed_same_result_for_every_strategy():
    for name in ("beam", "dvts", "mcts", "particle_filter", "rebase", "best_of_n"):
        strategy = make_strategy(name, n=8)
        a = run_one(*synthetic_backends(), strategy, seed=3)[0]
        b = run_one(*synthetic_backends(), strategy, seed=3)[0]
        c = run_one(*synthetic_backends(), strategy, seed=4)[0]
        assert a.tree == b.tree and a.answer == b.answer, name
        assert c.tree != a.tree, name


class _Recorder(ScriptedPolicy):
    def __init__(self, script):
        super().__init__(script)
        self.requests = []

    def generate(self, requests):
        self.requests.extend(requests)
        return super().generate(requests)


def test_greedy_makes_one_temperature_zero_solution():
    policy = _Recorder({(): ["s1"], ("s1",): ["\\boxed{3}"]})
    result, _ = run_one(policy, ScriptedScorer({}), make_strategy("greedy"))
    (request,) = policy.requests
    assert request.sampling.temperature == 0.0 and request.n == 1 and not request.stop_at_step
    assert result.answer == "3" and result.steps == ("s1", "\\boxed{3}")
    with pytest.raises(ValueError, match="n must be 1 for greedy"):
        make_strategy("greedy", n=4)


def test_beam_picks_by_prm_weighted_vote_by_default():
    """A hair-higher wrong path does not beat two agreeing ones (argmax would pick it)."""
    solutions = ["a \\boxed{5}", "b \\boxed{5}", "c \\boxed{7}", "d \\boxed{9}"]
    scores = {"a \\boxed{5}": 0.6, "b \\boxed{5}": 0.6, "c \\boxed{7}": 0.9, "d \\boxed{9}": 0.1}
    beam = make_strategy("beam", n=4, width=1)  # four beams finish
    assert beam.config.selection.value == "weighted"
    result, _ = run_one(ScriptedPolicy({(): solutions}), ScriptedScorer(scores), beam)
    assert result.answer == "5"
    argmax = make_strategy("beam", n=4, width=1, selection="argmax")
    assert run_one(ScriptedPolicy({(): solutions}), ScriptedScorer(scores), argmax)[0].answer == "7"


def test_particle_filter_picks_by_prm_weighted_vote_by_default():
    assert make_strategy("particle_filter", n=4).config.selection.value == "weighted"
    assert make_strategy("particle_filter", n=4, selection="argmax").config.selection.value == "argmax"


def test_a_step_repeated_within_the_window_ends_its_path_and_a_lookalike_does_not():
    # "x = 1" is a substring of "x = 12" but not the same step: the path goes on past it; the
    # second repeat of "x = 12" (spacing aside) among the last steps is a loop and ends the path
    script = {
        (): ["x = 12"],
        ("x = 12",): ["x = 1"],
        ("x = 12", "x = 1"): [" x = 12 "],
        ("x = 12", "x = 1", " x = 12 "): ["x = 12\n"],
        ("x = 12", "x = 1", " x = 12 ", "x = 12\n"): ["never reached \\boxed{1}"],
    }
    result, _ = run_one(ScriptedPolicy(script), ScriptedScorer({}), make_strategy("beam", n=1, width=1))
    tree = result.tree
    assert [tree.step_text[n] for n in tree.path(result.node)] == ["x = 12", "x = 1", " x = 12 ", "x = 12\n"]
    assert tree.terminal[result.node] and tree.truncated[result.node] and result.answer is None
    lookalike = script[("x = 12",)]
    assert all(not tree.terminal[n] for n in tree.iter_nodes() if tree.step_text[n] in lookalike)


def test_the_former_names_still_import_with_a_deprecation_warning():
    """``selection.Candidate`` (now ``Ballot``) works for one more release, and says so; a plain
    dataclass strategy config gets the StrategyConfig hooks' defaults."""
    import dataclasses

    from prmsearch.search import selection
    from prmsearch.search.protocol import StrategyConfig, StrategySpec

    with pytest.warns(DeprecationWarning, match="now Ballot"):
        assert selection.Candidate is selection.Ballot

    @dataclasses.dataclass(frozen=True)
    class Plain:
        n: int = 2

    spec = StrategySpec("plain", Plain, lambda tree, cfg, rng: iter(()), "a plain config")
    bound = spec.configure(n=3)
    assert isinstance(bound.config, StrategyConfig) and bound.config.n == 3
    assert bound.needs_scores and not bound.needs_logprobs and spec.budget_options(5) == {"n": 5}
