"""Bounded, shared backend calls (``max_batch``): no call holds more than its size, a small problem
rides in the next call instead of waiting for a large one's whole round, a cancelled problem's
unsent pieces are never computed, and a problem's search does not depend on what else runs."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import synthetic_backends, synthetic_scores, synthetic_script

from prmsearch import Searcher
from prmsearch.policies.base import Finish, Generation, GenerationRequest, StepOutput
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.shared_lanes import generation_pieces, merge_generations

QUESTIONS = [f"problem {i}" for i in range(5)]


class RecordingPolicy(ScriptedPolicy):
    """A scripted policy that logs each call's samples per question, and may take time per sample."""

    def __init__(self, script, per_sample_s: float = 0.0):
        super().__init__(script)
        self.per_sample_s = per_sample_s
        self.log: list[dict[str, int]] = []
        self.lock = threading.Lock()

    def generate(self, requests):
        time.sleep(self.per_sample_s * sum(r.n for r in requests))
        counts: dict[str, int] = {}
        for r in requests:
            counts[r.question] = counts.get(r.question, 0) + r.n
        with self.lock:
            self.log.append(counts)
        return super().generate(requests)


class RecordingScorer(ScriptedScorer):
    def __init__(self, fn):
        super().__init__(fn)
        self.sizes: list[int] = []

    def score(self, requests):
        self.sizes.append(len(requests))
        return super().score(requests)


def _same(a, b):
    assert a.tree == b.tree and a.answer == b.answer and a.node == b.node
    assert a.ledger.to_dict() | {"wall_s": 0} == b.ledger.to_dict() | {"wall_s": 0}


@pytest.mark.parametrize("name", ["beam", "dvts", "particle_filter", "best_of_n", "mcts", "self_consistency"])
def test_bounded_calls_give_the_same_searches_when_no_request_is_cut(name):
    policy, scorer = synthetic_backends(depth=4)
    plain = Searcher(policy, scorer, name, n=8, schedule="rounds").run(QUESTIONS)
    policy = RecordingPolicy(synthetic_script(4))
    scorer = RecordingScorer(synthetic_scores)
    bounded = Searcher(policy, scorer, name, n=8, max_batch=32).run(QUESTIONS)  # pieces of 8
    for a, b in zip(plain, bounded, strict=True):
        _same(a, b)
    assert max(sum(call.values()) for call in policy.log) <= 32
    assert max(scorer.sizes, default=0) <= 32
    assert len(policy.log) > 1  # five problems of 8 samples did not fit one call


def test_a_large_request_is_cut_in_pieces_whatever_else_runs():
    def search(questions):
        policy = RecordingPolicy(synthetic_script(3))
        results = Searcher(policy, ScriptedScorer(synthetic_scores), "best_of_n", n=100,
                           max_batch=16).run(questions)
        return results, policy

    (alone,), policy = search(["problem 0"])
    assert max(sum(call.values()) for call in policy.log) <= 16
    assert len(alone.candidates) == 100 and alone.ledger.generations == 100
    together, _ = search(["problem 0", "problem 1", "problem 2"])
    _same(alone, together[0])  # the pieces are cut at fixed places, not where others happen to be
    texts = {alone.tree.path_steps(c.node) for c in alone.candidates}
    assert len(texts) > 50  # later pieces have seeds of their own, not copies of the first


def test_a_small_problem_does_not_wait_for_a_large_ones_round():
    def small_done_first(max_batch):
        policy = RecordingPolicy(synthetic_script(3), per_sample_s=0.002)
        scorer = ScriptedScorer(synthetic_scores)
        searcher = Searcher(policy, scorer, "beam", n=4, width=2, max_batch=max_batch, schedule="async")
        big = Searcher(policy, scorer, "best_of_n", n=600).strategy
        done: dict[str, float] = {}
        with searcher.session() as session:
            large = session.submit("problem 0", strategy=big)
            time.sleep(0.05)  # the large round is under way
            small = session.submit("problem 1")
            small.add_done_callback(lambda _: done.setdefault("small", time.perf_counter()))
            large.add_done_callback(lambda _: done.setdefault("large", time.perf_counter()))
            small.result(timeout=60), large.result(timeout=60)
        return done["small"] < done["large"]

    assert small_done_first(64)
    assert not small_done_first(None)  # unbounded, it waits behind the whole 600-sample call


def test_cancelled_pieces_are_never_computed():
    policy = RecordingPolicy(synthetic_script(3), per_sample_s=0.001)
    searcher = Searcher(policy, ScriptedScorer(synthetic_scores), "best_of_n", n=2000, max_batch=64)
    with searcher.session() as session:
        future = session.submit("problem 0")
        time.sleep(0.2)
        future.cancel()
        time.sleep(0.3)
        sent_after = sum(sum(call.values()) for call in policy.log)
    assert sent_after < 2000 and sent_after <= 64 * (0.5 / (0.001 * 64) + 2)


def test_pieces_keep_the_request_order_and_merge_their_costs():
    request = GenerationRequest("q", (), n=10, seed=5)
    pieces = generation_pieces([GenerationRequest("q", (), n=2, seed=1), request], chunk=4)
    assert [(owner, p.n) for owner, p in pieces] == [(0, 2), (1, 4), (1, 4), (1, 2)]
    assert pieces[1][1].seed == 5 and len({p.seed for _, p in pieces[1:]}) == 3
    sample = StepOutput("a", (1, 2), -0.5, Finish.STEP)
    merged = merge_generations([Generation((sample,), 3, 1, None), Generation((sample, sample), 3, 0, 7)])
    assert len(merged.samples) == 3 and merged.prompt_tokens_computed == 6
    assert merged.prompt_tokens_cached == 1 and merged.generated_tokens == 2 + 7


def test_max_batch_is_checked():
    policy, scorer = synthetic_backends()
    with pytest.raises(ValueError, match="max_batch"):
        Searcher(policy, scorer, "beam", max_batch=0)
