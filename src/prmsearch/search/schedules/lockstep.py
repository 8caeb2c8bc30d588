"""Lock-step rounds: every problem waits for the whole round's generation, then its scoring."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from prmsearch.search.calls import BackendCalls
from prmsearch.search.job import Job
from prmsearch.search.protocol import Expand
from prmsearch.search.results import RunStats
from prmsearch.search.tree_writes import TreeWriter

Batch = TypeVar("Batch")


def run_lockstep(
    jobs: list[Job], finish: Callable[[Job], None], calls: BackendCalls, writer: TreeWriter, stats: RunStats
) -> None:
    """Rounds until every job has finished or failed: each round, every job's strategy asks
    for its expansion, the policy generates them all in one call, the children are written, and
    the scorer scores every new path in one call."""
    active = jobs
    while active:
        stats.rounds += 1
        expanding: list[tuple[Job, Expand]] = []
        for job in active:
            expand = job.advance()
            if expand is None:
                finish(job)
            else:
                expanding.append((job, expand))
        if not expanding:
            break
        batch = [(job, expand, writer.requests(job, expand)) for job, expand in expanding]
        generations = timed(stats, "policy", calls.generate, batch)
        written = [entry for entry in writer.write_generations(batch, generations) if entry[0].wants_scores]
        if written:
            writer.write_scored(written, timed(stats, "scorer", calls.score, written))
        active = []
        for job, _ in expanding:
            if job.error is not None:
                finish(job)
            else:
                active.append(job)


def timed(
    stats: RunStats, backend: str, call: Callable[[Batch], dict[int, list[Any]]], batch: Batch
) -> dict[int, list[Any]]:
    """One backend call, counted in ``stats`` (``backend`` "policy" or "scorer")."""
    started = time.perf_counter()
    out = call(batch)
    elapsed = time.perf_counter() - started
    setattr(stats, f"{backend}_batches", getattr(stats, f"{backend}_batches") + 1)
    setattr(stats, f"{backend}_s", getattr(stats, f"{backend}_s") + elapsed)
    stats.backend_s += elapsed
    return out
