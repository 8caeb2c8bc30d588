"""The asynchronous flow: every problem advances as soon as its own results return.

A problem goes to the policy's lane as soon as its steps are scored, and to the scorer's lane
as soon as its steps are generated; a lane calls its backend on a worker thread (see
:class:`~prmsearch.search.lanes.Lane`), so the policy and the PRM work at once. Tree writes,
strategy steps and the ledger stay on the flow's thread; a job is in at most one backend call at
a time.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol

from prmsearch.policies.base import Generation, GenerationRequest
from prmsearch.scorers.base import ScoreRequest, StepScores
from prmsearch.search.calls import BackendCalls
from prmsearch.search.events import CallEnded, Close, Event, Joined
from prmsearch.search.job import Job
from prmsearch.search.lanes import Lane
from prmsearch.search.protocol import Expand
from prmsearch.search.results import RunStats
from prmsearch.search.shared_lanes import SharedLane, generation_pieces, merge_generations


class RoundSteps(Protocol):
    """The driver's steps the flow runs per problem (`prmsearch.search.driver.Driver`)."""

    calls: BackendCalls
    stats: RunStats

    def generation_requests(self, job: Job, expand: Expand) -> list[GenerationRequest]: ...

    def write_children(self, job: Job, expand: Expand, requests: list[GenerationRequest],
                       generations: list[Generation]) -> list[Any]: ...

    def score_requests(self, job: Job, paths: list[Any]) -> list[ScoreRequest]: ...

    def write_scores(self, job: Job, paths: list[Any], requests: list[ScoreRequest],
                     results: list[StepScores | None]) -> None: ...


#: the PRM waits for this share of the problems on their way to it before it scores a batch
SCORE_BATCH_SHARE = 0.25

#: most policy calls in flight at once when each problem's requests are their own call
PARALLEL_CALLS = 128


@contextmanager
def backend_pools(policy_workers: int) -> Iterator[tuple[ThreadPoolExecutor, ThreadPoolExecutor]]:
    """The policy's and the scorer's call threads. At a normal end they finish their calls; when
    the flow is left by an error (Ctrl-C, SIGTERM) nobody waits for the calls in flight, which end
    when their backend is closed."""
    policy_pool = ThreadPoolExecutor(max_workers=policy_workers, thread_name_prefix="prmsearch-policy")
    scorer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prmsearch-scorer")
    try:
        yield policy_pool, scorer_pool
    except BaseException:
        for pool in (policy_pool, scorer_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        raise
    for pool in (policy_pool, scorer_pool):
        pool.shutdown(wait=True)


def run_flow(
    jobs: list[Job],
    finish: Callable[[Job], None],
    steps: RoundSteps,
    groups: int = 1,
    events: queue.SimpleQueue[Event] | None = None,
    accepting: bool = False,
    max_batch: int | None = None,
) -> None:
    """Run ``jobs`` through the flow until all have finished or failed.

    With ``max_batch`` each backend call holds at most that many samples (policy) or paths (PRM),
    and the problems waiting share each call in turns (`SharedLane`): a small problem never waits
    for a large one's whole round.

    With a batching policy the problems start in ``groups`` groups, the next joining each time
    the policy has nothing in flight. With ``accepting`` the flow also takes `Joined` events
    (problems joining mid-run) until a `Close` event, and a job whose caller cancelled it is
    dropped when it would advance (a `Wake` event makes the flow look).
    """
    events = events if events is not None else queue.SimpleQueue()
    parallel = steps.calls.parallel
    groups = 1 if parallel else groups  # a parallel policy takes every problem at once
    with backend_pools(PARALLEL_CALLS if parallel else 1) as pools:
        parked = [jobs[g::groups] for g in range(groups)] if jobs else []
        flow = Flow(steps, finish, events, pools, max_batch, accepting, parked)
        try:
            flow.run()
        finally:
            flow.count_stats()


class Flow:
    """One run of the flow: its two lanes, the jobs waiting to start, and the loop that takes
    each event as it comes. Everything here runs on the flow's thread."""

    def __init__(self, steps: RoundSteps, finish: Callable[[Job], None], events: queue.SimpleQueue[Event],
                 pools: tuple[ThreadPoolExecutor, ThreadPoolExecutor], max_batch: int | None,
                 accepting: bool, parked: list[list[Job]]) -> None:
        calls = steps.calls
        self.steps, self.finish, self.events, self.accepting = steps, finish, events, accepting
        self.shared = calls.shared  # one object is policy and scorer: its calls take turns
        policy_pool, scorer_pool = pools
        score_pool = policy_pool if self.shared else scorer_pool
        self.generating: Lane
        self.scoring: Lane
        if max_batch is None:
            self.generating = Lane("generated", calls.generate, events, policy_pool, calls.parallel)
            self.scoring = Lane("scored", calls.score, events, score_pool, False)
        else:
            self.generating = SharedLane("generated", calls.generate, events, policy_pool, calls.parallel,
                                         max_batch, pieces=generation_pieces, units=lambda request: request.n,
                                         merge=merge_generations)
            self.scoring = SharedLane("scored", calls.score, events, score_pool, False, max_batch,
                                      pieces=lambda requests, _: list(enumerate(requests)), units=lambda _: 1)
        self.parked = parked  # groups of jobs waiting to start, the next when the policy is free
        self.busy_since: float | None = None  # when a backend call started running while none was

    def run(self) -> None:
        """Start what can start, then wait for the next event, until nothing is left."""
        while True:
            self.start_calls()
            if self.generating.idle and self.scoring.idle and not self.parked and not self.accepting:
                return
            self.take(self.events.get())

    def start_calls(self) -> None:
        """Start the next group when the policy is free, then every backend call the lanes allow."""
        generating, scoring, shared = self.generating, self.scoring, self.shared
        if self.parked and generating.idle and (not shared or scoring.idle):
            for job in self.parked.pop(0):
                self.advance(job)
        if not (shared and scoring.in_flight):
            if self.accepting:  # a session's callers may have cancelled waiting jobs
                generating.drop(self.dropped)
            self.steps.stats.rounds += generating.pump()
        if not (shared and generating.in_flight) and score_now(scoring, generating):
            scoring.pump()
        self.track_busy()

    def take(self, event: Event) -> None:
        """Act on one event: a backend call's results, a problem joining, or the session's close."""
        if isinstance(event, Joined):
            self.advance(event.job)
        elif isinstance(event, Close):
            self.accepting = False
        elif isinstance(event, CallEnded):
            lane = self.generating if event.lane == "generated" else self.scoring
            entries, results = lane.finished(event.items, event.future.result())
            self.track_busy()
            (self.generated if lane is self.generating else self.scored)(entries, results)
        # a Wake only makes the loop run once, to drop a cancelled job

    def advance(self, job: Job) -> None:
        """Resume the job's strategy: its next requests go to the policy's lane, or it finishes."""
        if self.dropped(job):
            return
        expand = job.advance()
        if expand is None:
            self.finish(job)
        else:
            self.generating.put((job, expand, self.steps.generation_requests(job, expand)))

    def dropped(self, job: Job) -> bool:
        """A job whose caller cancelled it ends here (no more work for it)."""
        if not job.cancelled:
            return False
        job.fail("cancelled: the caller stopped waiting", "cancelled")
        self.finish(job)
        return True

    def generated(self, items: list[Any], generations: dict[int, list[Generation]]) -> None:
        """Write the children of a finished policy call; their paths go to the scorer's lane."""
        steps = self.steps
        written = [(job, steps.write_children(job, expand, requests, generations[id(job)]))
                   for job, expand, requests in items if id(job) in generations]
        for job, _, _ in items:
            if job.error is not None:  # its generation failed
                self.finish(job)
        for job, paths in written:
            if job.wants_scores:
                self.scoring.put((job, paths, steps.score_requests(job, paths)))
            else:
                self.advance(job)

    def scored(self, items: list[Any], scores: dict[int, list[StepScores | None]]) -> None:
        """Write the scores of a finished scorer call; each job advances (or ends, when failed)."""
        for job, paths, requests in items:
            if id(job) in scores:
                self.steps.write_scores(job, paths, requests, scores[id(job)])
        for job, _, _ in items:
            if job.error is not None:
                self.finish(job)
            else:
                self.advance(job)

    def track_busy(self) -> None:
        """Count the time at least one backend call ran (the backends' share of the wall time)."""
        running = [lane for lane in (self.generating, self.scoring) if lane.in_flight]
        if running and self.busy_since is None:
            self.busy_since = min(lane.busy_since for lane in running)
        elif not running and self.busy_since is not None:
            self.steps.stats.backend_s += time.perf_counter() - self.busy_since
            self.busy_since = None

    def count_stats(self) -> None:
        """Add the lanes' calls and busy time to the run's stats (also after an error)."""
        stats = self.steps.stats
        if self.busy_since is not None:
            stats.backend_s += time.perf_counter() - self.busy_since
        stats.policy_batches += self.generating.calls
        stats.scorer_batches += self.scoring.calls
        stats.policy_s += self.generating.busy_s
        stats.scorer_s += self.scoring.busy_s


def score_now(scoring: Lane, generating: Lane) -> bool:
    """Whether the PRM should take what waits for it now, or wait for more: a PRM call has a
    fixed cost, so it waits until a quarter of the problems on their way to it have arrived (or
    nothing more is coming: the policy has nothing in flight)."""
    waiting = len(scoring.waiting)
    coming = generating.items_in_flight
    return waiting > 0 and (not coming or waiting >= SCORE_BATCH_SHARE * (waiting + coming))
