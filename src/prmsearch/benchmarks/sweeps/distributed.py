"""Sharding a sweep's problems over Ray actors, on one machine or a cluster.

Each actor builds its own policy and scorer once (from the sweep configuration, or from a
picklable factory: backends are never pickled) and runs whole chunks: one batched driver run per
chunk, exactly as in-process, returning the chunk's rows. The driver process keeps every actor
busy, collects rows as chunks finish (``ray.wait``) and is the only writer of ``results.jsonl``,
so resume and no-duplicates work as in a single-process run. A problem's seed depends only on the
run seed and its question, so the rows are the same whichever actor ran them. A killed run loses
at most the chunks in flight (smaller ``--chunk`` values lose less and stream more often).

Ray is imported only when a :class:`RayRunner` runs (``pip install prmsearch[ray]``).
"""

from __future__ import annotations

import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prmsearch.benchmarks.sweeps.results import ResultRow
from prmsearch.policies.base import Policy
from prmsearch.scorers.base import Scorer

if TYPE_CHECKING:
    from prmsearch.api import Searcher

BackendFactory = Callable[[], tuple[Policy, Scorer]]
#: A unit of work: (strategy, budget, seed, problems of one chunk).
ChunkTask = tuple[str, int, int, Sequence[Any]]


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide a sweep runs on Ray.

    Attributes:
        address: an existing cluster (``"auto"``, ``"ray://head:10001"``, ``"10.0.0.1:6379"``);
            None starts a local cluster for the run and stops it afterwards.
        workers: actors, each with its own backends (None: one per GPU of the cluster, or 2
            when it has none).
        cpus_per_worker: CPUs each actor reserves.
        gpus_per_worker: GPUs each actor reserves (None: 1 when the cluster has GPUs, else 0).
        inflight: chunks queued per actor, so an actor never waits for the driver.
    """

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None
    inflight: int = 2

    def __post_init__(self) -> None:
        if self.address is not None and not str(self.address).strip():
            raise ValueError(f"address must name a Ray cluster or be None, got {self.address!r}")
        if self.workers is not None and (isinstance(self.workers, bool) or self.workers < 1):
            raise ValueError(f"workers must be an int >= 1, got {self.workers!r}")
        if self.cpus_per_worker < 0:
            raise ValueError(f"cpus_per_worker must be >= 0, got {self.cpus_per_worker}")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise ValueError(f"gpus_per_worker must be >= 0, got {self.gpus_per_worker}")
        if self.inflight < 1:
            raise ValueError(f"inflight must be >= 1, got {self.inflight}")


def import_ray():
    """The ``ray`` module, or an error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            "running a sweep on Ray needs ray: pip install 'prmsearch[ray]' (or 'ray>=2.9')"
        ) from None
    return ray


class SweepWorker:
    """What one actor does: hold the backends and turn chunks into rows.

    A plain class (Ray wraps it with ``ray.remote`` at run time), so it is testable without Ray.
    """

    def __init__(self, config, backends: BackendFactory | None, grade, matcher) -> None:
        from prmsearch.benchmarks.sweeps.sweep import build_backends

        self.config = config
        self.policy, self.scorer = backends() if backends is not None else build_backends(config)
        if grade is None:
            from prmsearch.benchmarks.grading import is_equivalent

            grade = is_equivalent
        if matcher is None:
            from prmsearch.benchmarks.grading import search_matcher

            matcher = search_matcher()
        self.grade, self.matcher = grade, matcher
        self._cell: tuple[str, int, int] | None = None
        self._searcher: Searcher | None = None

    def run(self, strategy: str, budget: int, seed: int, problems: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows of one chunk as JSON objects (plain data across the process boundary), in the
        order its problems finished."""
        from prmsearch.benchmarks.sweeps.sweep import chunk_rows, clear_backend_caches, make_searcher

        cell = (strategy, budget, seed)
        if cell != self._cell:  # chunks of one cell arrive together: keep its searcher
            clear_backend_caches(self.policy, self.scorer)
            self._searcher = make_searcher(self.config, self.policy, self.scorer, *cell, self.matcher)
            self._cell = cell
        rows: list[ResultRow] = []
        assert self._searcher is not None  # made for the first cell above
        chunk_rows(self._searcher, list(problems), strategy, budget, seed, self.grade, rows.append)
        return [row.to_dict() for row in rows]

    def ready(self) -> bool:
        """True once the backends are loaded (the driver waits on it to report load errors)."""
        return True


class RayRunner:
    """Runs a sweep's chunks on Ray actors; pass it to :func:`~prmsearch.benchmarks.sweeps.sweep.run_sweep`.

    Example::

        runner = RayRunner(RayConfig(workers=4))                 # local cluster, 4 actors
        run_sweep(config, problems, out, runner=runner)
    """

    def __init__(self, ray_config: RayConfig | None = None, backends: BackendFactory | None = None) -> None:
        self.ray_config = ray_config or RayConfig()
        self.backends = backends

    def describe(self) -> str:
        where = self.ray_config.address or "local"
        return f"ray ({where}, {self.ray_config.workers or 'auto'} workers)"

    def run(
        self,
        config,
        tasks: Sequence[ChunkTask],
        emit: Callable[[ResultRow], None],
        *,
        grade=None,
        matcher=None,
    ) -> None:
        """Run every sweep task on the actors and ``emit`` each row in the driver as chunks finish."""

        def rows(chunk: list[dict[str, Any]]) -> None:
            for row in chunk:
                emit(ResultRow.from_dict(row))

        self.map(SweepWorker, (config, self.backends, grade, matcher), tasks, rows)

    def map(
        self, worker_class: type, worker_args: tuple, tasks: Sequence[tuple], on_result: Callable[[Any], None]
    ) -> None:
        """The general form: start actors of ``worker_class(*worker_args)`` (a plain class with a
        ``ready()`` and a ``run(*task)`` method), run every task on them, and call ``on_result`` in
        this process with each task's return value as it arrives (completion order). Other
        sharded jobs (``prmsearch label --ray``) use it with their own worker class."""
        if not tasks:
            return
        ray = import_ray()
        started = self._connect(ray)
        actors: list[Any] = []
        try:
            workers, gpus = self._shape(ray, len(tasks))
            remote = ray.remote(worker_class).options(num_cpus=self.ray_config.cpus_per_worker, num_gpus=gpus)
            actors = [remote.remote(*worker_args) for _ in range(workers)]
            ray.get([actor.ready.remote() for actor in actors])  # a backend that cannot load fails here
            self._schedule(ray, actors, deque(tasks), on_result)
        finally:
            for actor in actors:
                ray.kill(actor)
            if started:
                ray.shutdown()

    def _connect(self, ray) -> bool:
        """Join the configured cluster (or start a local one); True when this call started Ray.

        ``ray.init`` replaces the process's SIGTERM handler with one that exits at once (status
        15); the handler from before is put back, so that a command stopped by SIGTERM still
        stops as on Ctrl-C: rows kept, engines closed, the resume command printed."""
        if ray.is_initialized():
            return False
        cfg = self.ray_config
        in_main = threading.current_thread() is threading.main_thread()
        before = signal.getsignal(signal.SIGTERM) if in_main else None
        if cfg.address is not None:
            ray.init(address=cfg.address, include_dashboard=False)
        else:
            cpus = max(1, round((cfg.workers or 2) * max(cfg.cpus_per_worker, 1.0)))
            ray.init(num_cpus=cpus, include_dashboard=False)
        if before is not None:  # None: a handler set outside Python, which cannot be put back
            signal.signal(signal.SIGTERM, before)
        return True

    def _shape(self, ray, n_tasks: int) -> tuple[int, float]:
        """(actors, GPUs per actor) for this cluster; never more actors than tasks."""
        cfg = self.ray_config
        cluster_gpus = int(ray.cluster_resources().get("GPU", 0))
        gpus = cfg.gpus_per_worker if cfg.gpus_per_worker is not None else (1.0 if cluster_gpus else 0.0)
        workers = cfg.workers or (cluster_gpus if cluster_gpus and gpus else 2)
        return max(1, min(workers, n_tasks)), gpus

    def _schedule(self, ray, actors: list[Any], queue: deque, on_result) -> None:
        """Keep ``inflight`` tasks queued on every actor; hand each result over as it returns."""
        owner: dict[Any, Any] = {}

        def submit(actor) -> None:
            owner[actor.run.remote(*queue.popleft())] = actor

        for _ in range(self.ray_config.inflight):
            for actor in actors:
                if queue:
                    submit(actor)
        while owner:
            (done,), _ = ray.wait(list(owner), num_returns=1)
            actor = owner.pop(done)
            on_result(ray.get(done))
            if queue:
                submit(actor)
