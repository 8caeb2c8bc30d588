"""The driver: batching across problems, the ledger, truncation and error containment."""

from __future__ import annotations

import json
import math

import pytest
from helpers import synthetic_backends, synthetic_scores, synthetic_script

from prmsearch import Searcher
from prmsearch.policies.base import Finish, Generation, StepOutput
from prmsearch.policies.scripted import ScriptedPolicy, ScriptedStep
from prmsearch.scorers.base import ContextLengthError, StepScores
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.ledger import Ledger
from prmsearch.search.protocol import Choice

QUESTIONS = [f"problem {i}" for i in range(6)]


@pytest.mark.parametrize("name", ["beam", "dvts", "mcts", "particle_filter", "rebase", "best_of_n"])
def test_ledger_adds_up_exactly(name):
    policy, scorer = synthetic_backends(depth=3)
    searcher = Searcher(policy, scorer, name, n=8)
    results = searcher.run(QUESTIONS)
    total = searcher.last_ledger
    summed = Ledger.total(r.ledger for r in results)
    for field in (
        "policy_calls",
        "generations",
        "generated_tokens",
        "prompt_tokens_computed",
        "prm_calls",
        "prm_tokens_computed",
        "policy_flops",
        "prm_flops",
    ):
        assert getattr(total, field) == getattr(summed, field), field
    for r in results:
        tree, ledger = r.tree, r.ledger
        generated = sum(len(ids) for ids in tree.token_ids)
        assert ledger.generated_tokens == generated
        assert ledger.policy_flops == 2 * policy.num_parameters * (
            ledger.prompt_tokens_computed + ledger.generated_tokens
        )
        assert ledger.prm_flops == 2 * scorer.num_parameters * ledger.prm_tokens_computed
        # every sample carries its tokens on exactly one node (a whole solution on its last step)
        assert ledger.generations == sum(1 for ids in tree.token_ids if ids)
        assert ledger.prm_calls == ledger.generations


@pytest.mark.parametrize("name", ["beam", "best_of_n"])
def test_token_logprobs_sit_with_the_tokens_they_belong_to(name):
    # beam adds one sample per step node; best_of_n splits whole solutions into chains whose last
    # node holds every token (and so every token's log-probability)
    def script(question, steps, index, seed):
        if len(steps) >= 2:
            return ScriptedStep(f"so \\boxed{{{index}}}", logprob=-0.5 * (index + 1))
        return ScriptedStep(f"step {len(steps)} option {index}", logprob=-2.0)

    policy = ScriptedPolicy(script, token_logprobs=True)
    (result,) = Searcher(policy, ScriptedScorer({}), name, n=4).run(["q"])
    tree = result.tree
    holding = [node for node in tree.iter_nodes() if tree.token_ids[node]]
    assert holding and tree.token_logprobs[0] == ()
    for node in tree.iter_nodes():
        lps = tree.token_logprobs[node]
        assert len(lps) == len(tree.token_ids[node])
        assert math.isclose(sum(lps), tree.logprob[node], abs_tol=1e-12)
    if name == "best_of_n":  # a whole solution: 4 + 4 + 2 tokens on the last node, none before it
        assert all(len(tree.token_logprobs[n]) == 10 for n in holding)
        assert all(tree.token_logprobs[tree.parent[n]] == () for n in holding)


def test_one_batched_call_per_round_across_problems():
    policy, scorer = synthetic_backends(depth=3)
    searcher = Searcher(policy, scorer, "beam", n=8, width=2)
    searcher.run(QUESTIONS)
    stats = searcher.last_stats
    assert len(policy.calls) == stats.policy_batches == len(scorer.calls)
    assert policy.calls[0] == len(QUESTIONS)  # round one: every problem's root in one call


def test_batched_run_equals_one_problem_at_a_time():
    batched = Searcher(*synthetic_backends(), "beam", n=8, width=2).run(QUESTIONS)
    single = [Searcher(*synthetic_backends(), "beam", n=8, width=2)(q) for q in QUESTIONS]
    assert [r.answer for r in batched] == [r.answer for r in single]
    assert all(a.tree == b.tree for a, b in zip(batched, single))


def test_finished_problems_leave_the_batch():
    def script(question, steps, index, seed):
        depth = int(question.split()[-1])
        return "\\boxed{1}" if len(steps) + 1 >= depth else f"s{len(steps)}"

    policy = ScriptedPolicy(script)
    searcher = Searcher(policy, ScriptedScorer({}), "beam", n=2, width=1)
    searcher.run(["depth 1", "depth 3"])
    assert policy.calls == [2, 2, 2]  # round 1 both problems; then only the deeper one (2 beams)


def test_empty_step_and_max_depth_are_truncated_and_search_goes_on():
    script = {(): ["", "a"], ("a",): ["b"], ("a", "b"): ["c"]}
    policy = ScriptedPolicy(script)
    searcher = Searcher(policy, ScriptedScorer({"": 0.9, "a": 0.5}), "beam", n=2, width=1, max_depth=2)
    result = searcher("q")
    tree = result.tree
    empty, a = tree.children(0)
    assert tree.terminal[empty] and tree.truncated[empty]
    (b,) = tree.children(a)
    assert tree.terminal[b] and tree.truncated[b] and tree.answer[b] is None
    assert result.error is None


def test_length_finish_is_truncated():
    script = {(): [ScriptedStep("cut off", Finish.LENGTH)]}
    result = Searcher(ScriptedPolicy(script), ScriptedScorer({}), "beam", n=1, width=1)("q")
    assert result.tree.truncated[1] and result.answer is None


def test_a_failing_problem_does_not_take_down_the_batch():
    good = synthetic_script(depth=2)

    def script(question, steps, index, seed):
        if question == "bad":
            raise RuntimeError("backend exploded on this prompt")
        return good(question, steps, index, seed)

    searcher = Searcher(ScriptedPolicy(script), ScriptedScorer(synthetic_scores), "beam", n=4)
    results = searcher.run(["ok 1", "bad", "ok 2"])
    assert results[1].error.startswith("policy failed: RuntimeError: backend exploded")
    assert results[1].answer is None
    assert results[0].error is None and results[0].answer is not None
    assert results[2].error is None and results[2].answer is not None


class _BrokenScorer(ScriptedScorer):
    def score(self, requests):
        out = super().score(requests)
        return [StepScores(r.scores[:-1]) if "bad" in q.question else r for q, r in zip(requests, out)]


def test_misaligned_scores_are_a_per_problem_error():
    scorer = _BrokenScorer(synthetic_scores)
    searcher = Searcher(ScriptedPolicy(synthetic_script(2)), scorer, "beam", n=4)
    results = searcher.run(["fine", "bad"])
    assert results[0].error is None
    assert "scores for" in results[1].error and "separator" in results[1].error


class _WrongCountPolicy:
    num_parameters = 10

    def generate(self, requests):
        return [Generation((StepOutput("x", (1,), 0.0, Finish.STEP),), 1) for _ in requests]


def test_policy_returning_too_few_samples_is_reported():
    result = Searcher(_WrongCountPolicy(), ScriptedScorer({}), "beam", n=4)("q")
    assert "asked for 4" in result.error


def test_result_serialises_to_json():
    result = Searcher(*synthetic_backends(), "beam", n=4)("q")
    data = json.loads(json.dumps(result.to_dict(include_tree=True)))
    assert data["answer"] == result.answer
    assert len(data["steps"]) == len(data["step_scores"])
    assert data["ledger"]["generations"] == result.ledger.generations
    assert data["tree"]["step_text"][result.node] == result.steps[-1]


class ShortContextScorer(ScriptedScorer):
    """A scripted PRM whose context holds at most ``limit`` steps (like a real one's tokens)."""

    def __init__(self, limit: int, scores=None) -> None:
        super().__init__(scores or {}, default=0.5)
        self.limit = limit

    def score(self, requests):
        for i, request in enumerate(requests):
            if len(request.steps) > self.limit:
                raise ContextLengthError(f"request {i}: {len(request.steps)} steps, context {self.limit}")
        return super().score(requests)


def test_a_path_longer_than_the_prm_context_ends_as_a_leaf_not_a_failure():
    # one branch finishes in 2 steps, the other would need 4: the PRM reads at most 3
    script = {
        (): ["short", "long"],
        ("short",): ["\\boxed{1}"],
        ("long",): ["l2"],
        ("long", "l2"): ["l3"],
        ("long", "l2", "l3"): ["\\boxed{2}"],
    }
    scorer = ShortContextScorer(limit=3, scores={"long": 0.9, "short": 0.1})  # beam follows "long"
    others = ["What is 1?", "What is 2?"]  # batched with other problems: only this one is affected
    searcher = Searcher(ScriptedPolicy(script), scorer, "beam", n=2, width=2)
    results = searcher.run(["q", *others])
    result = results[0]
    assert result.error is None and result.answer == "2"  # the search finished, with the leaf it had
    assert any("outgrew the PRM's context" in note for note in result.notes)
    tree = result.tree
    deep = [n for n in range(1, len(tree)) if tree.depth[n] == 4]
    assert deep and all(math.isnan(tree.score[n]) and tree.terminal[n] for n in deep)  # unscored leaf
    assert all(r.error is None for r in results)
    # a non-final step past the context ends the path there, truncated
    script[("long", "l2", "l3")] = ["l4"]
    script[("long", "l2", "l3", "l4")] = ["\\boxed{2}"]
    result = Searcher(ScriptedPolicy(script), scorer, "beam", n=2, width=2)("q")
    assert result.error is None
    cut = [n for n in range(1, len(result.tree)) if result.tree.depth[n] == 4]
    assert cut and all(result.tree.truncated[n] and result.tree.terminal[n] for n in cut)
    assert not [n for n in range(1, len(result.tree)) if result.tree.depth[n] == 5]  # never extended


def test_other_scorer_failures_still_fail_the_problem():
    class Broken(ScriptedScorer):
        def score(self, requests):
            raise RuntimeError("PRM server down")

    result = Searcher(ScriptedPolicy({(): ["\\boxed{1}"]}), Broken({}), "beam", n=1, width=1)("q")
    assert result.error is not None and "PRM server down" in result.error


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (lambda leaves: Choice(-1, tuple(leaves)), "chose node -1"),
        (lambda leaves: Choice(10_000, tuple(leaves)), "chose node 10000"),
        (lambda leaves: Choice(leaves[0], (*leaves, 10_001)), "chose node 10001"),
        (lambda leaves: leaves[0], "must return a Choice"),
    ],
)
def test_a_broken_choice_fails_its_own_problem_only(returned, message):
    """A strategy returning a node outside the tree (or no Choice) fails that problem with a
    clear error; the other problems of the batch finish, and no wrong answer is reported."""
    from prmsearch.search.protocol import BoundStrategy, Expand, StrategySpec
    from prmsearch.search.strategies.common import SearchConfig
    from prmsearch.tree import ROOT

    def algorithm(tree, cfg, rng):
        (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
        if tree.question == "broken":
            return returned(leaves)
        return Choice(leaves[0], tuple(leaves))

    spec = StrategySpec("broken_choice", SearchConfig, algorithm, "returns what it is told")
    strategy = BoundStrategy(spec, SearchConfig(n=2))
    searcher = Searcher(ScriptedPolicy(synthetic_script(2)), ScriptedScorer(synthetic_scores), strategy)
    fine, broken = searcher.run(["fine", "broken"])
    assert fine.error is None and fine.answer is not None
    assert message in broken.error and broken.answer is None
