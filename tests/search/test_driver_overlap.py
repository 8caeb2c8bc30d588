"""The overlapped driver (``overlap`` groups taking turns): the same searches as lock step, scoring
that really runs while another group generates, and failures contained per problem."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from helpers import synthetic_backends, synthetic_scores, synthetic_script

from prmsearch import Searcher
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.ledger import Ledger

QUESTIONS = [f"problem {i}" for i in range(7)]
STRATEGIES = ["beam", "dvts", "mcts", "particle_filter", "rebase", "best_of_n", "greedy", "self_consistency"]


def _run(name: str, overlap: int, questions=QUESTIONS, **options):
    policy, scorer = synthetic_backends(depth=4)
    searcher = Searcher(policy, scorer, name, overlap=overlap, **options)
    return searcher, searcher.run(questions)


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("overlap", [2, 3, 16])
def test_overlapped_searches_equal_lock_step(name, overlap):
    n = {"greedy": 1}.get(name, 8)
    _, lock = _run(name, 1, n=n)
    searcher, over = _run(name, overlap, n=n)
    assert [r.question for r in over] == QUESTIONS  # input order kept
    for a, b in zip(lock, over, strict=True):
        assert a.tree == b.tree and a.answer == b.answer and a.node == b.node
        assert a.ledger.to_dict() | {"wall_s": 0} == b.ledger.to_dict() | {"wall_s": 0}
    assert Ledger.total(r.ledger for r in over).policy_calls == searcher.last_ledger.policy_calls


def _timed(log: list, kind: str, call, requests):
    """Run one backend call after a short sleep (so calls of the two backends can meet) and log
    when and on which thread it ran."""
    start = time.perf_counter()
    time.sleep(0.02)
    out = call(requests)
    log.append((kind, start, time.perf_counter(), threading.get_ident()))
    return out


class _SlowPolicy(ScriptedPolicy):
    def __init__(self, script, log):
        super().__init__(script)
        self.log = log

    def generate(self, requests):
        return _timed(self.log, "policy", super().generate, requests)


class _SlowScorer(ScriptedScorer):
    def __init__(self, scores, log):
        super().__init__(scores)
        self.log = log

    def score(self, requests):
        return _timed(self.log, "scorer", super().score, requests)


def test_the_prm_scores_one_group_while_the_policy_generates_another():
    log: list = []
    policy = _SlowPolicy(synthetic_script(4), log)
    scorer = _SlowScorer(synthetic_scores, log)
    Searcher(policy, scorer, "beam", n=4, width=2, overlap=2).run(QUESTIONS)
    calls = {kind: [(s, e) for k, s, e, _ in log if k == kind] for kind in ("policy", "scorer")}
    overlapping = sum(
        1 for ps, pe in calls["policy"] for ss, se in calls["scorer"] if ps < se and ss < pe
    )
    assert overlapping >= 2
    assert {t for *_, t in log} != {threading.get_ident()}  # the backends ran on worker threads


def test_lock_step_never_overlaps():
    log: list = []
    policy = _SlowPolicy(synthetic_script(3), log)
    scorer = _SlowScorer(synthetic_scores, log)
    Searcher(policy, scorer, "beam", n=4, width=2).run(QUESTIONS)
    spans = sorted((s, e) for _, s, e, _ in log)
    assert all(e1 <= s2 for (_, e1), (s2, _) in itertools.pairwise(spans))


def test_a_failing_problem_does_not_take_down_the_overlapped_batch():
    good = synthetic_script(depth=3)

    def script(question, steps, index, seed):
        if question == "bad" and steps:
            raise RuntimeError("backend exploded on this prompt")
        return good(question, steps, index, seed)

    questions = ["ok 1", "bad", "ok 2", "ok 3"]
    searcher = Searcher(ScriptedPolicy(script), ScriptedScorer(synthetic_scores), "beam", n=4, overlap=2)
    results = searcher.run(questions)
    assert results[1].error.startswith("policy failed: RuntimeError: backend exploded")
    assert all(r.error is None and r.answer is not None for i, r in enumerate(results) if i != 1)


def test_one_backend_object_as_policy_and_scorer_runs_in_lock_step():
    from prmsearch.search.driver import Driver, RunConfig

    policy, _ = synthetic_backends()
    assert Driver(policy, policy, RunConfig(overlap=4)).overlap_groups(10) == 1
    assert Driver(*synthetic_backends(), RunConfig(overlap=4)).overlap_groups(3) == 3


def test_overlap_must_be_a_positive_int():
    from prmsearch.search.driver import RunConfig

    with pytest.raises(ValueError, match="overlap"):
        RunConfig(overlap=0)


def test_the_schedule_measurement_reports_every_schedule_on_the_same_answers():
    from benchmarks.schedules import DEFAULT_SCHEDULES, measure_schedules

    policy, scorer = synthetic_backends(depth=3)
    cleared = []
    figures = measure_schedules(
        policy, scorer, QUESTIONS, "beam", repeats=2, clear_caches=lambda: cleared.append(1), n=4, width=2,
    )
    assert figures.same_answers and figures.problems == len(QUESTIONS)
    assert len(cleared) == 2 * len(DEFAULT_SCHEDULES) and figures.labels == tuple(DEFAULT_SCHEDULES)
    assert all(pps > 0 for pps in figures.problems_per_s) and figures.ratios()[0] == 1.0
    assert figures.row().count("|") == figures.header().splitlines()[0].count("|")
