"""The asynchronous flow: problems that advance on their own results (one policy call each when
the policy takes parallel calls), the same searches as lock step, and sessions that problems
join mid-run."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import synthetic_backends, synthetic_scores, synthetic_script

from prmsearch import Searcher
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.driver import Driver, RunConfig
from prmsearch.search.protocol import make_strategy
from prmsearch.search.session import DriverSession, SessionClosed

QUESTIONS = [f"problem {i}" for i in range(6)]
STRATEGIES = ["beam", "dvts", "mcts", "particle_filter", "rebase", "best_of_n", "greedy", "self_consistency"]


class ParallelPolicy(ScriptedPolicy):
    """A scripted policy that takes concurrent calls, each after a delay set per question (a
    stand-in for a server: the calls of different problems run at once and end out of order)."""

    parallel_calls = True

    def __init__(self, script, delay=lambda question: 0.0):
        super().__init__(script)
        self.delay = delay
        self.log: list[tuple[str, float, float]] = []  # (question, start, end) per call
        self.lock = threading.Lock()

    def generate(self, requests):
        start = time.perf_counter()
        time.sleep(max(self.delay(r.question) for r in requests))
        out = super().generate(requests)
        with self.lock:
            self.log.append((requests[0].question, start, time.perf_counter()))
        return out


def _delay(question: str) -> float:
    return 0.002 * (int(question.split()[-1]) % 3)


def _same(a, b):
    assert a.question == b.question and a.tree == b.tree and a.answer == b.answer and a.node == b.node
    assert a.ledger.to_dict() | {"wall_s": 0} == b.ledger.to_dict() | {"wall_s": 0}


@pytest.mark.parametrize("name", STRATEGIES)
def test_async_searches_equal_lock_step(name):
    n = {"greedy": 1}.get(name, 8)
    policy, scorer = synthetic_backends(depth=4)
    lock = Searcher(policy, scorer, name, n=n, schedule="rounds").run(QUESTIONS)
    parallel = ParallelPolicy(synthetic_script(4), _delay)
    searcher = Searcher(parallel, ScriptedScorer(synthetic_scores), name, n=n)  # auto: async
    flowing = searcher.run(QUESTIONS)
    for a, b in zip(lock, flowing, strict=True):
        _same(a, b)
    # every policy call held one problem's requests only
    assert len(parallel.log) == searcher.last_stats.policy_batches >= len(QUESTIONS)


def test_async_with_a_batching_policy_equals_lock_step():
    policy, scorer = synthetic_backends(depth=4)
    lock = Searcher(policy, scorer, "beam", n=8, width=2, schedule="rounds").run(QUESTIONS)
    policy, scorer = synthetic_backends(depth=4)
    flowing = Searcher(policy, scorer, "beam", n=8, width=2, schedule="async").run(QUESTIONS)
    for a, b in zip(lock, flowing, strict=True):
        _same(a, b)


def test_a_slow_problem_stalls_only_itself():
    slow = "problem 0"
    policy = ParallelPolicy(synthetic_script(3), lambda q: 0.15 if q == slow else 0.0)
    finished: list[tuple[str, float]] = []
    searcher = Searcher(policy, ScriptedScorer(synthetic_scores), "beam", n=4, width=2)
    searcher.run(QUESTIONS, on_result=lambda i, r: finished.append((r.question, time.perf_counter())))
    order = [q for q, _ in finished]
    assert order[-1] == slow  # the others did not wait for its steps, round after round
    slow_calls = [(s, e) for q, s, e in policy.log if q == slow]
    others_done = max(t for q, t in finished if q != slow)
    assert others_done < slow_calls[1][0] + 0.15  # done before its second step came back


def test_lock_step_rounds_wait_for_the_slowest_problem():
    policy = ParallelPolicy(synthetic_script(3), lambda q: 0.05 if q == "problem 0" else 0.0)
    searcher = Searcher(policy, ScriptedScorer(synthetic_scores), "beam", n=4, width=2, schedule="rounds")
    searcher.run(QUESTIONS)
    # one call per round for all problems: the 4 steps of a path, not one call per problem
    assert len(policy.log) == searcher.last_stats.policy_batches == 4


def test_a_failing_problem_fails_alone_in_the_async_flow():
    good = synthetic_script(depth=3)

    def script(question, steps, index, seed):
        if question == "bad" and steps:
            raise RuntimeError("backend exploded on this prompt")
        return good(question, steps, index, seed)

    searcher = Searcher(ParallelPolicy(script), ScriptedScorer(synthetic_scores), "beam", n=4)
    results = searcher.run(["ok 1", "bad", "ok 2"])
    assert results[1].error.startswith("policy failed: RuntimeError: backend exploded")
    assert [r.error for r in results[::2]] == [None, None] and all(r.answer for r in results[::2])


def test_schedule_is_validated():
    with pytest.raises(ValueError, match="schedule must be one of"):
        RunConfig(schedule="eventually")


def test_which_schedule_runs():
    policy, scorer = synthetic_backends()
    assert not Driver(policy, scorer).asynchronous(5)
    assert Driver(policy, scorer, RunConfig(schedule="async")).asynchronous(5)
    assert Driver(policy, scorer, RunConfig(overlap=2)).asynchronous(5)
    assert not Driver(policy, scorer, RunConfig(overlap=2)).asynchronous(1)
    parallel = ParallelPolicy(synthetic_script())
    assert Driver(parallel, scorer).asynchronous(5)
    assert not Driver(parallel, scorer, RunConfig(schedule="rounds")).asynchronous(5)


class HostCPUPolicy(ParallelPolicy):
    """A parallel policy that says its model computes on this machine's CPU (an in-process vLLM
    engine without a GPU)."""

    computes_on_host_cpu = True


class HostCPUScorer(ScriptedScorer):
    """A scorer that says its model computes on this machine's CPU."""

    computes_on_host_cpu = True


def test_auto_keeps_rounds_when_policy_and_scorer_share_the_host_cpu():
    policy = HostCPUPolicy(synthetic_script())
    cpu_scorer = HostCPUScorer(synthetic_scores)
    assert not Driver(policy, cpu_scorer).asynchronous(5)
    # only where both compute here: a free scorer (or one elsewhere) keeps the overlap
    assert Driver(policy, ScriptedScorer(synthetic_scores)).asynchronous(5)
    assert Driver(ParallelPolicy(synthetic_script()), cpu_scorer).asynchronous(5)
    # an explicit choice wins
    assert Driver(policy, cpu_scorer, RunConfig(schedule="async")).asynchronous(5)
    assert Driver(policy, cpu_scorer, RunConfig(overlap=2)).asynchronous(5)
    # and the searches are the same either way
    lock = Searcher(policy, cpu_scorer, "beam", n=8, width=2).run(QUESTIONS)
    flowing = Searcher(policy, cpu_scorer, "beam", n=8, width=2, schedule="async").run(QUESTIONS)
    for a, b in zip(lock, flowing, strict=True):
        _same(a, b)


# ------------------------------------------------------------------------------------ sessions
class GatedPolicy(ScriptedPolicy):
    """A batching policy whose first call waits until the test opens the gate, logging the
    questions of each call."""

    def __init__(self, script):
        super().__init__(script)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.questions: list[set[str]] = []

    def generate(self, requests):
        self.entered.set()
        self.gate.wait(10)
        self.questions.append({r.question for r in requests})
        return super().generate(requests)


def test_problems_join_a_running_search_and_share_its_batches():
    policy = GatedPolicy(synthetic_script(3))
    scorer = ScriptedScorer(synthetic_scores)
    strategy = make_strategy("beam", n=4, width=2)
    reference = Driver(*synthetic_backends(3)).run(QUESTIONS, strategy, list(range(6)))
    with DriverSession(Driver(policy, scorer)) as session:
        early = [session.submit(q, strategy, seed) for seed, q in enumerate(QUESTIONS[:3])]
        assert policy.entered.wait(10)  # the first call is running...
        late = [session.submit(q, strategy, seed + 3) for seed, q in enumerate(QUESTIONS[3:])]
        policy.gate.set()  # ...and the late problems join the next one
        results = [f.result(timeout=20) for f in early + late]
    assert policy.questions[0] <= set(QUESTIONS[:3])  # the first call holds early problems only
    # a late problem's first step went out together with an early problem's later step
    assert any(qs & set(QUESTIONS[:3]) and qs & set(QUESTIONS[3:]) for qs in policy.questions[1:])
    for a, b in zip(reference, results, strict=True):
        _same(a, b)


def test_a_cancelled_problem_is_dropped_and_the_others_finish():
    policy = GatedPolicy(synthetic_script(4))
    strategy = make_strategy("beam", n=4, width=2)
    session = DriverSession(Driver(policy, ScriptedScorer(synthetic_scores)))
    kept = session.submit("problem 1", strategy, 1)
    gone = session.submit("problem 2", strategy, 2)
    assert policy.entered.wait(10)
    assert gone.cancel()
    policy.gate.set()
    assert kept.result(timeout=20).answer is not None
    session.close()
    assert gone.cancelled() and session.pending == 0
    calls_with_gone = [qs for qs in policy.questions if "problem 2" in qs]
    assert len(calls_with_gone) <= 1  # at most the call already running when it was cancelled
    assert sum("problem 1" in qs for qs in policy.questions) == 5  # 4 steps and the answer


def test_a_closed_session_refuses_problems_and_blank_questions_are_errors():
    session = DriverSession(Driver(*synthetic_backends()))
    with pytest.raises(ValueError, match="non-blank"):
        session.submit("   ", make_strategy("greedy"), 0)
    session.close()
    with pytest.raises(SessionClosed, match="closed"):
        session.submit("problem 1", make_strategy("greedy"), 0)


def test_one_object_as_policy_and_scorer_never_runs_two_calls_at_once():
    class Both(ScriptedPolicy):
        def __init__(self):
            super().__init__(synthetic_script(3))
            self.busy = threading.Lock()
            self.clashes = 0

        def _enter(self):
            if not self.busy.acquire(blocking=False):
                self.clashes += 1
                self.busy.acquire()
            time.sleep(0.002)

        def generate(self, requests):
            self._enter()
            try:
                return super().generate(requests)
            finally:
                self.busy.release()

        def score(self, requests):
            self._enter()
            try:
                return ScriptedScorer(synthetic_scores).score(requests)
            finally:
                self.busy.release()

    both = Both()
    with Searcher(both, both, "beam", n=4, width=2).session() as session:
        futures = [session.submit(q) for q in QUESTIONS]
        assert all(f.result(timeout=20).error is None for f in futures)
    assert both.clashes == 0


def test_searcher_sessions_take_per_question_options_and_annotate():
    policy, scorer = synthetic_backends(depth=3)
    searcher = Searcher(policy, scorer, "beam", n=8, width=2, annotate=lambda q: f"note on {q}")
    with searcher.session() as session:
        narrow = session.submit("problem 1", n=4)  # the searcher's width, a smaller budget
        other = session.submit("problem 2", strategy="best_of_n", n=2)
        default = session.solve("problem 3")
        narrow, other = narrow.result(timeout=20), other.result(timeout=20)
    assert narrow.strategy == "beam" and narrow.ledger.generations < default.ledger.generations
    assert other.strategy == "best_of_n" and other.ledger.generations == 2
    assert default.notes == ["note on problem 3"]
    assert default.tree == searcher.run(["problem 3"])[0].tree  # the same seed as run()


def test_backend_time_is_counted_once_when_the_backends_overlap():
    policy = ParallelPolicy(synthetic_script(3), lambda q: 0.01)
    searcher = Searcher(policy, ScriptedScorer(synthetic_scores), "beam", n=4, width=2)
    searcher.run(QUESTIONS)
    stats = searcher.last_stats
    slack = 1e-3  # each lane and the union read the clock at slightly different moments
    assert max(stats.policy_s, stats.scorer_s) - slack <= stats.backend_s <= stats.wall_s
    assert stats.driver_s >= 0
    lock = Searcher(*synthetic_backends(3), "beam", n=4, width=2)
    lock.run(QUESTIONS)
    assert lock.last_stats.backend_s == lock.last_stats.policy_s + lock.last_stats.scorer_s


def test_a_parallel_policy_with_overlap_groups_searches_every_problem():
    """Overlap groups take turns only with a batching policy; a parallel one takes every problem
    at once, and none is left out."""
    policy, scorer = synthetic_backends(depth=4)
    lock = Searcher(policy, scorer, "beam", n=8, schedule="rounds").run(QUESTIONS)
    parallel = ParallelPolicy(synthetic_script(4), _delay)
    results = Searcher(parallel, ScriptedScorer(synthetic_scores), "beam", n=8, overlap=3).run(QUESTIONS)
    assert len(results) == len(QUESTIONS)
    for a, b in zip(lock, results):
        _same(a, b)
