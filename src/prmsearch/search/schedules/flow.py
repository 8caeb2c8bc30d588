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
from typing import Any

from prmsearch.search.calls import BackendCalls
from prmsearch.search.job import Job
from prmsearch.search.lanes import Lane
from prmsearch.search.results import RunStats
from prmsearch.search.shared_lanes import SharedLane, generation_pieces, merge_generations
from prmsearch.search.tree_writes import TreeWriter

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
    calls: BackendCalls,
    writer: TreeWriter,
    stats: RunStats,
    groups: int = 1,
    events: queue.SimpleQueue[tuple[Any, ...]] | None = None,
    accepting: bool = False,
    max_batch: int | None = None,
) -> None:
    """Run ``jobs`` through the flow until all have finished or failed.

    With ``max_batch`` each backend call holds at most that many samples (policy) or paths (PRM),
    and the problems waiting share each call in turns (`SharedLane`): a small problem never waits
    for a large one's whole round.

    With a batching policy the problems start in ``groups`` groups, the next joining each time
    the policy has nothing in flight. With ``accepting`` the flow also takes ``("job", job)``
    events (problems joining mid-run) until a ``("close",)`` event, and a job whose caller
    cancelled it is dropped when it would advance (a ``("wake",)`` event makes the flow look).
    """
    events = events if events is not None else queue.SimpleQueue()
    parallel, shared = calls.parallel, calls.shared  # shared: one object, its calls take turns
    groups = 1 if parallel else groups
    with backend_pools(PARALLEL_CALLS if parallel else 1) as (policy_pool, scorer_pool):
        score_pool = policy_pool if shared else scorer_pool
        if max_batch is None:
            generating = Lane("generated", calls.generate, events, policy_pool, parallel)
            scoring = Lane("scored", calls.score, events, score_pool, False)
        else:
            generating = SharedLane("generated", calls.generate, events, policy_pool, parallel, max_batch,
                                    pieces=generation_pieces, units=lambda request: request.n,
                                    merge=merge_generations)
            scoring = SharedLane("scored", calls.score, events, score_pool, False, max_batch,
                                 pieces=lambda requests, _: list(enumerate(requests)), units=lambda _: 1)
        parked = [jobs[g::groups] for g in range(groups)] if jobs else []

        def dropped(job: Job) -> bool:
            """A job whose caller cancelled it ends here (no more work for it)."""
            if not job.cancelled:
                return False
            job.fail("cancelled: the caller stopped waiting", "cancelled")
            finish(job)
            return True

        def advance(job: Job) -> None:
            if dropped(job):
                return
            expand = job.advance()
            if expand is None:
                finish(job)
            else:
                generating.put((job, expand, writer.requests(job, expand)))

        busy_since: list[float] = []  # when a backend call started running while none was

        def track_busy() -> None:
            running = [lane for lane in (generating, scoring) if lane.in_flight]
            if running and not busy_since:
                busy_since.append(min(lane.busy_since for lane in running))
            elif not running and busy_since:
                stats.backend_s += time.perf_counter() - busy_since.pop()

        def generated(items: list[Any], generations: dict[int, list[Any]]) -> None:
            written = writer.write_generations(items, generations)
            for job, _, _ in items:
                if job.error is not None:  # its generation failed
                    finish(job)
            for entry in written:
                if entry[0].wants_scores:
                    scoring.put(entry)
                else:
                    advance(entry[0])

        def scored(items: list[Any], scores: dict[int, list[Any]]) -> None:
            writer.write_scored(items, scores)
            for job, _, _ in items:
                if job.error is not None:
                    finish(job)
                else:
                    advance(job)

        try:
            while True:
                if parked and generating.idle and (not shared or scoring.idle):
                    for job in parked.pop(0):
                        advance(job)
                if not (shared and scoring.in_flight):
                    if accepting:  # a session's callers may have cancelled waiting jobs
                        generating.drop(dropped)
                    stats.rounds += generating.pump()
                if not (shared and generating.in_flight) and score_now(scoring, generating):
                    scoring.pump()
                track_busy()
                if generating.idle and scoring.idle and not parked and not accepting:
                    break
                event = events.get()
                kind = event[0]
                if kind == "job":
                    advance(event[1])
                elif kind == "close":
                    accepting = False
                elif kind == "wake":  # a caller cancelled: the loop runs once to drop its job
                    pass
                else:
                    lane = generating if kind == "generated" else scoring
                    entries, results = lane.finished(event[1], event[2].result())
                    track_busy()
                    (generated if lane is generating else scored)(entries, results)
        finally:
            if busy_since:
                stats.backend_s += time.perf_counter() - busy_since.pop()
            stats.policy_batches += generating.calls
            stats.scorer_batches += scoring.calls
            stats.policy_s += generating.busy_s
            stats.scorer_s += scoring.busy_s


def score_now(scoring: Lane, generating: Lane) -> bool:
    """Whether the PRM should take what waits for it now, or wait for more: a PRM call has a
    fixed cost, so it waits until a quarter of the problems on their way to it have arrived (or
    nothing more is coming: the policy has nothing in flight)."""
    waiting = len(scoring.waiting)
    coming = generating.items_in_flight
    return waiting > 0 and (not coming or waiting >= SCORE_BATCH_SHARE * (waiting + coming))
