"""The driver: the one loop that runs many problems' searches at once.

Each round it asks every active problem's strategy what to expand, sends all those requests to
the policy in ONE batched call, writes the children into the trees, scores every new path in ONE
batched scorer call, charges each problem's ledger, and hands each strategy its children. A
problem whose strategy finishes leaves the batch; the others go on. A failure is contained: when a
batched call raises, the driver retries it problem by problem, and only the problems that still
fail stop, each with its error recorded. A backend that says it cannot be reached at all (see
:func:`backend_unreachable`) is not retried problem by problem: every problem of the batch fails
at once, so a sweep notices a dead server in seconds, not after every problem's retries.
"""

from __future__ import annotations

import gc
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from prmsearch.answers import AnswerMatcher, extract_answer
from prmsearch.costs import backend_cost
from prmsearch.policies.base import Finish, Generation, GenerationRequest, Policy, SamplingParams
from prmsearch.scorers.base import ContextLengthError, Scorer, ScoreRequest, StepScores, check_scores
from prmsearch.search.aggregation import Aggregation, path_score
from prmsearch.search.lanes import Lane
from prmsearch.search.ledger import Ledger
from prmsearch.search.protocol import BoundStrategy, Choice, Expand
from prmsearch.search.selection import Vote, tally
from prmsearch.seeding import mix_seed
from prmsearch.steps import split_steps
from prmsearch.tree import ROOT, SearchTree

#: how problems move through the backends (see `RunConfig.schedule`)
SCHEDULES = ("auto", "rounds", "async")

#: the PRM waits for this share of the problems on their way to it before it scores a batch
SCORE_BATCH_SHARE = 0.25

#: most policy calls in flight at once when each problem's requests are their own call
PARALLEL_CALLS = 128


@dataclass(frozen=True)
class RunConfig:
    """Settings shared by every problem of a run.

    Attributes:
        sampling: temperature, top-p, per-step token limit and step delimiter.
        max_depth: steps after which a path is cut off (marked terminal and truncated).
        solution_max_tokens: token limit for whole-solution requests (best-of-N family).
        stop_on_answer: a step containing a final ``\\boxed{}`` answer ends the path.
        schedule: how problems move through the backends. ``"rounds"``: in rounds, every
            problem waiting for the whole round's generation and then its scoring (lock step).
            ``"async"``: each problem advances as soon as its own steps come back; its requests
            are their own policy call when the policy takes parallel calls (the HTTP server
            backends), else they join whatever else waits whenever the policy is free, and the
            PRM scores whatever waits whenever it is free, so the two backends work at once.
            ``"auto"`` (default): async when the policy takes parallel calls, else rounds.
        overlap: start the problems in ``overlap`` groups that take turns, so that the PRM scores
            one group's new steps while the policy generates another's (1: one group; more than
            1 implies the async schedule for batching backends).

    Each problem's search stays the same for its seed under every schedule when the backends'
    samples do not depend on batch composition (the scripted and transformers backends, vLLM
    with per-request seeds); see `Driver`.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_depth: int = 32
    solution_max_tokens: int = 2048
    stop_on_answer: bool = True
    overlap: int = 1
    schedule: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, SamplingParams):
            raise ValueError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        for name in ("max_depth", "solution_max_tokens", "overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of the solutions a strategy chose among (for offline re-selection, e.g. subsampling).

    Attributes:
        node: its last node in the tree.
        answer: its extracted answer (None when it has none).
        group: its answer group (equivalent answers share one; ``NO_GROUP`` when no answer).
        score: its aggregated path score under the strategy's aggregation (NaN when unscored).
    """

    node: int
    answer: str | None
    group: int
    score: float


@dataclass
class SearchResult:
    """The outcome of one problem's search.

    Attributes:
        question: the problem.
        strategy: the strategy's registered name.
        answer: the extracted final answer (None when the chosen path has none).
        node: the chosen node id in ``tree``.
        steps: the chosen path's step texts.
        step_scores: the PRM's score for each of those steps.
        score: the chosen path's aggregated score.
        votes: answer tallies over the strategy's candidates, most votes first.
        tree: the whole search tree.
        ledger: compute spent on this problem.
        seed: the problem's seed.
        error: ``"ExceptionType: message"`` when the search failed, else None.
        notes: remarks for the user (e.g. a question outside the models' domain).
        candidates: the strategy's candidates, in the order it listed them (empty on failure).
        report: what the strategy reported about its run (:attr:`Choice.report`, e.g. the
            planner's bin and arm); empty for most strategies and on failure.
    """

    question: str
    strategy: str
    answer: str | None
    node: int
    steps: tuple[str, ...]
    step_scores: tuple[float, ...]
    score: float
    votes: list[Vote]
    tree: SearchTree
    ledger: Ledger
    seed: int
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    candidates: tuple[Candidate, ...] = ()
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The chosen solution, steps joined by blank lines."""
        return "\n\n".join(self.steps)

    def to_dict(self, include_tree: bool = False) -> dict[str, Any]:
        """A JSON-ready dict (the tree only when asked: it can be large)."""
        data: dict[str, Any] = {
            "question": self.question,
            "strategy": self.strategy,
            "answer": self.answer,
            "steps": list(self.steps),
            "step_scores": [None if np.isnan(s) else s for s in self.step_scores],
            "score": None if np.isnan(self.score) else self.score,
            "votes": [{"answer": v.answer, "count": v.count, "weight": v.weight} for v in self.votes],
            "ledger": self.ledger.to_dict(),
            "seed": self.seed,
            "nodes": len(self.tree),
            "error": self.error,
            "notes": list(self.notes),
        }
        if self.report:
            data["report"] = dict(self.report)
        if include_tree:
            data["tree"] = self.tree.to_dict()
        return data

    def to_networkx(self, **attributes: Any):
        """The search tree as a ``networkx.DiGraph`` (needs networkx), the chosen path marked and
        the question, strategy, answer, score and ledger as graph attributes
        (:func:`prmsearch.tree_graph.result_graph`)."""
        from prmsearch.tree_graph import result_graph, to_networkx

        return to_networkx(result_graph(self, **attributes))


@dataclass
class RunStats:
    """What the driver itself did: rounds and batched backend calls.

    ``policy_s`` and ``scorer_s`` are the time each backend had a call running; under the async
    schedule they overlap, so ``backend_s`` is the time at least one of them had, and
    ``driver_s`` the rest of the wall time.
    """

    rounds: int = 0
    policy_batches: int = 0
    scorer_batches: int = 0
    policy_s: float = 0.0
    scorer_s: float = 0.0
    wall_s: float = 0.0
    nodes: int = 0
    backend_s: float = 0.0

    @property
    def driver_s(self) -> float:
        """Wall time with no backend call running: the orchestration overhead."""
        return self.wall_s - self.backend_s


class _Job:
    """One problem in flight: its tree, strategy generator, ledger and answer groups."""

    __slots__ = (
        "choice",
        "error",
        "expansions",
        "gen",
        "groups",
        "index",
        "ledger",
        "paths",
        "reply",
        "seed",
        "started",
        "strategy",
        "ticket",
        "too_long",
        "tree",
    )

    def __init__(self, index: int, question: str, strategy: BoundStrategy, seed: int) -> None:
        self.index = index
        self.strategy = strategy
        self.ticket: Any = None  # the Future a session hands its caller (None in a plain run)
        self.tree = SearchTree(question)
        self.seed = seed
        self.gen = strategy.start(self.tree, np.random.default_rng(seed))
        self.reply: list[list[int]] | None = None
        self.ledger = Ledger()
        self.started = time.perf_counter()
        self.groups: dict[str, int] = {}
        self.expansions: dict[int, int] = {}
        self.error: str | None = None
        self.choice: Choice | None = None
        self.too_long = 0  # paths longer than the PRM's context, ended as unscored leaves
        self.paths: dict[int, tuple[str, ...]] = {}  # step texts of the last round's new nodes


#: allocations between collections of the youngest generation while a driver runs (CPython: 700)
GC_THRESHOLD = 50_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextmanager
def fewer_gc_pauses() -> Iterator[None]:
    """Collect the youngest GC generation every `GC_THRESHOLD` allocations instead of every 700
    while the search loop runs, and restore the old thresholds after the last running driver.

    The loop allocates many short-lived, acyclic objects (requests, step tuples, scores) that
    reference counting frees at once; each cyclic collection also walks the growing trees. With
    instant backends that took about a quarter of the driver's time (`prmsearch.perf.overhead`).
    """
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            if 0 < _gc_saved[0] < GC_THRESHOLD:
                gc.set_threshold(GC_THRESHOLD, *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


def backend_unreachable(exc: BaseException) -> bool:
    """Whether a backend's exception says it cannot be reached at all (a true
    ``backend_unreachable`` attribute, as on the HTTP backends' ``ServerUnreachable``): then the
    driver fails the whole batch at once instead of retrying it problem by problem."""
    return bool(getattr(exc, "backend_unreachable", False))


def _describe(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {frame[0].filename.rsplit('/', 1)[-1]}:{frame[0].lineno})" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"


class Driver:
    """Runs a strategy over many problems with batched policy and scorer calls."""

    def __init__(
        self,
        policy: Policy,
        scorer: Scorer,
        config: RunConfig | None = None,
        matcher: AnswerMatcher | None = None,
    ) -> None:
        self.policy = policy
        self.scorer = scorer
        self.config = config or RunConfig()
        self.matcher = matcher or AnswerMatcher()
        self.stats = RunStats()
        self._canonical_forms: dict[str, str] = {}
        self._policy_cost = backend_cost(policy)
        self._scorer_cost = backend_cost(scorer)
        self._scorer_reads_logprobs = bool(getattr(scorer, "reads_policy_logprobs", False))
        sampling = self.config.sampling
        self._full_sampling = SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=self.config.solution_max_tokens,
            delimiter=sampling.delimiter,
        )

    # ------------------------------------------------------------------ main loop
    def run(
        self,
        questions: Sequence[str],
        strategy: BoundStrategy,
        seeds: Sequence[int],
        on_result: Callable[[int, SearchResult], None] | None = None,
    ) -> list[SearchResult]:
        """Search every question; results come back in input order.

        ``on_result(index, result)`` is called as each problem finishes (for streaming output).
        """
        if len(seeds) != len(questions):
            raise ValueError(f"got {len(seeds)} seeds for {len(questions)} questions")
        start = time.perf_counter()
        results: list[SearchResult | None] = [None] * len(questions)
        active = [_Job(i, q, strategy, int(s)) for i, (q, s) in enumerate(zip(questions, seeds))]

        def finish(job: _Job) -> None:
            result = self._result(job)
            results[job.index] = result
            if on_result is not None:
                on_result(job.index, result)

        with fewer_gc_pauses():
            if self.asynchronous(len(active)):
                self._flow(active, finish)
            else:
                self._loop(active, finish)
        self.stats.wall_s += time.perf_counter() - start
        return [r for r in results if r is not None]

    def asynchronous(self, problems: int) -> bool:
        """Whether a run of ``problems`` problems uses the asynchronous flow (see
        `RunConfig.schedule`) rather than lock-step rounds."""
        schedule = self.config.schedule
        if schedule == "async" or self._overlap_groups(problems) > 1:
            return True
        return schedule == "auto" and self._parallel_policy()

    def _parallel_policy(self) -> bool:
        """Whether the policy takes concurrent calls (``parallel_calls``), so that each problem's
        requests can be their own call; never when one object is policy and scorer."""
        return bool(getattr(self.policy, "parallel_calls", False)) and self.policy is not self.scorer

    def _loop(self, active: list[_Job], finish: Callable[[_Job], None]) -> None:
        """Lock-step rounds until every job has finished or failed."""
        while active:
            self.stats.rounds += 1
            expanding: list[tuple[_Job, Expand]] = []
            for job in active:
                expand = self._advance(job)
                if expand is None:
                    finish(job)
                else:
                    expanding.append((job, expand))
            active = [job for job, _ in expanding]
            if not active:
                break
            self._expand_round(expanding)
            still = []
            for job in active:
                if job.error is not None:
                    finish(job)
                else:
                    still.append(job)
            active = still

    def _overlap_groups(self, jobs: int) -> int:
        """How many groups take turns (1 = all at once): never more than there are problems,
        and 1 when one object is both policy and scorer (its calls must not run at once)."""
        if self.policy is self.scorer:
            return 1
        return max(1, min(self.config.overlap, jobs))

    def _flow(
        self,
        jobs: list[_Job],
        finish: Callable[[_Job], None],
        events: queue.SimpleQueue | None = None,
        accepting: bool = False,
    ) -> None:
        """The asynchronous flow: every problem advances as soon as its own results return.

        A problem goes to the policy's lane as soon as its steps are scored, and to the
        scorer's lane as soon as its steps are generated; a lane calls its backend on a worker
        thread (see :class:`~prmsearch.search.lanes.Lane`). With a batching policy the problems
        start in ``overlap`` groups, the next joining each time the policy has nothing in flight.
        Tree writes, strategy steps and the ledger stay on this thread; a job is in at most one
        backend call at a time. With ``accepting`` the flow also takes ``("job", job)`` events
        (problems joining mid-run) until a ``("close",)`` event, and a job whose ``ticket`` was
        cancelled is dropped when it would advance.
        """
        events = events if events is not None else queue.SimpleQueue()
        parallel = self._parallel_policy()
        groups = 1 if parallel else self._overlap_groups(len(jobs))
        shared = self.policy is self.scorer  # one object: its calls take turns on one thread
        workers = PARALLEL_CALLS if parallel else 1
        with (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prmsearch-policy") as policy_pool,
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="prmsearch-scorer") as scorer_pool,
        ):
            generating = Lane("generated", self._generate, events, policy_pool, parallel)
            scoring = Lane("scored", self._score, events, policy_pool if shared else scorer_pool, False)
            parked = [jobs[g::groups] for g in range(groups)] if jobs else []

            def dropped(job: _Job) -> bool:
                """A job whose caller cancelled it ends here (no more work for it)."""
                if job.ticket is None or not job.ticket.cancelled():
                    return False
                job.error = "cancelled: the caller stopped waiting"
                finish(job)
                return True

            def advance(job: _Job) -> None:
                if dropped(job):
                    return
                expand = self._advance(job)
                if expand is None:
                    finish(job)
                else:
                    generating.put((job, expand, self._requests(job, expand)))

            busy_since: list[float] = []  # when a backend call started running while none was

            def track_busy() -> None:
                running = [lane for lane in (generating, scoring) if lane.in_flight]
                if running and not busy_since:
                    busy_since.append(min(lane.busy_since for lane in running))
                elif not running and busy_since:
                    self.stats.backend_s += time.perf_counter() - busy_since.pop()

            try:
                while True:
                    if parked and generating.idle and (not shared or scoring.idle):
                        for job in parked.pop(0):
                            advance(job)
                    if not (shared and scoring.in_flight):
                        if accepting:  # a session's callers may have cancelled waiting jobs
                            generating.waiting = [e for e in generating.waiting if not dropped(e[0])]
                        self.stats.rounds += generating.pump()
                    if not (shared and generating.in_flight) and self._score_now(scoring, generating):
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
                    elif kind == "generated":
                        items = event[1]
                        generating.finished(items)
                        track_busy()
                        written = self._write_generations(items, event[2].result())
                        for job, _, _ in items:
                            if job.error is not None:  # its generation failed
                                finish(job)
                        for entry in written:
                            if self._wants_scores(entry[0]):
                                scoring.put(entry)
                            else:
                                advance(entry[0])
                    else:
                        items = event[1]
                        scoring.finished(items)
                        track_busy()
                        self._write_scored(items, event[2].result())
                        for job, _, _ in items:
                            if job.error is not None:
                                finish(job)
                            else:
                                advance(job)
            finally:
                if busy_since:
                    self.stats.backend_s += time.perf_counter() - busy_since.pop()
                self.stats.policy_batches += generating.calls
                self.stats.scorer_batches += scoring.calls
                self.stats.policy_s += generating.busy_s
                self.stats.scorer_s += scoring.busy_s

    @staticmethod
    def _score_now(scoring: Lane, generating: Lane) -> bool:
        """Whether the PRM should take what waits for it now, or wait for more: a PRM call has a
        fixed cost, so it waits until a quarter of the problems on their way to it have
        arrived (or nothing more is coming: the policy has nothing in flight)."""
        waiting = len(scoring.waiting)
        coming = generating.items_in_flight
        return waiting > 0 and (not coming or waiting >= SCORE_BATCH_SHARE * (waiting + coming))

    @staticmethod
    def _wants_scores(job: _Job) -> bool:
        """Whether a job's new steps are scored (a strategy that reads no scores skips the PRM:
        its steps keep NaN scores and its ledger no PRM compute)."""
        return job.strategy.needs_scores

    def _advance(self, job: _Job) -> Expand | None:
        """Resume a strategy; None when it finished (choice set) or failed (error set)."""
        try:
            expand = next(job.gen) if job.reply is None else job.gen.send(job.reply)
            self._check_expand(job.tree, expand)
            return expand
        except StopIteration as stop:
            try:
                self._check_choice(job.tree, stop.value)
            except Exception as exc:  # a broken strategy fails its own problem only
                job.error = _describe(exc)
                return None
            job.choice = stop.value
            return None
        except Exception as exc:
            job.error = _describe(exc)
            return None

    @staticmethod
    def _check_choice(tree: SearchTree, choice: object) -> None:
        if not isinstance(choice, Choice):
            raise TypeError(f"strategies must return a Choice, got {type(choice).__name__}")
        size = len(tree)
        for node in (choice.node, *choice.candidates):
            if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= node < size:
                raise ValueError(f"strategy chose node {node!r}, not in the tree (size {size})")

    @staticmethod
    def _check_expand(tree: SearchTree, expand: object) -> None:
        if not isinstance(expand, Expand):
            raise TypeError(f"strategies must yield Expand, got {type(expand).__name__}")
        if not expand.requests:
            raise ValueError("a strategy yielded an Expand with no requests")
        size = len(tree)
        for node, count in expand.requests:
            if not 0 <= node < size:
                raise ValueError(f"strategy asked to expand node {node}, not in the tree")
            if tree.terminal[node]:
                raise ValueError(f"strategy asked to expand terminal node {node}")
            if count < 1:
                raise ValueError(f"strategy asked for {count} children of node {node}")

    # ------------------------------------------------------------------ one round
    def _expand_round(self, expanding: list[tuple[_Job, Expand]]) -> None:
        """Generate every job's requests in one policy call, write the children, then score the
        new paths in one scorer call (only the jobs that want scores: see `_wants_scores`)."""
        batch = [(job, expand, self._requests(job, expand)) for job, expand in expanding]
        generations = self._timed("policy", self._generate, batch)
        written = [entry for entry in self._write_generations(batch, generations)
                   if self._wants_scores(entry[0])]
        if written:
            self._write_scored(written, self._timed("scorer", self._score, written))

    def _timed(self, backend: str, call: Callable[[list], dict[int, list]], batch: list) -> dict[int, list]:
        """One lock-step backend call, counted in `stats` (``backend`` "policy" or "scorer")."""
        started = time.perf_counter()
        out = call(batch)
        elapsed = time.perf_counter() - started
        stats = self.stats
        setattr(stats, f"{backend}_batches", getattr(stats, f"{backend}_batches") + 1)
        setattr(stats, f"{backend}_s", getattr(stats, f"{backend}_s") + elapsed)
        stats.backend_s += elapsed
        return out

    def _generate(self, batch: list[tuple[_Job, Any, list]]) -> dict[int, list]:
        """One batched policy call for ``(job, expand, requests)`` triples (see `_batched`)."""
        per_job = [(job, requests) for job, _, requests in batch]
        return self._batched(per_job, self.policy.generate, self._check_generations, "policy")

    def _score(self, batch: list[tuple[_Job, Any, list]]) -> dict[int, list]:
        """One batched scorer call for ``(job, spans, requests)`` triples (see `_batched`)."""
        per_job = [(job, requests) for job, _, requests in batch]
        return self._batched(
            per_job, self.scorer.score, self._check_scores, "scorer", recover=self._score_each
        )

    def _write_generations(self, batch, generations: dict[int, list]) -> list[tuple[_Job, list, list]]:
        """Write each job's children and hand back ``(job, spans, score requests)`` for scoring;
        a job whose generation failed (its error is set) is left out."""
        written = []
        for job, expand, requests in batch:
            gens = generations.get(id(job))
            if gens is None:
                continue
            reply, spans, score_requests = self._write_children(job, expand, requests, gens)
            job.reply = reply
            written.append((job, spans, score_requests))
        return written

    def _write_scored(self, batch: list[tuple[_Job, list, list]], scored: dict[int, list]) -> None:
        """Write the scores each job got back (a job whose scoring failed has its error set)."""
        for job, spans, requests in batch:
            results = scored.get(id(job))
            if results is not None:
                self._write_scores(job, spans, requests, results)

    def _score_each(self, job: _Job, requests: list[ScoreRequest], exc: BaseException) -> list | None:
        """After a job's scoring failed because a path is longer than the PRM's context, score its
        paths one by one; a too-long path gets None (it ends as an unscored leaf). None when the
        failure was something else (the job then fails with it)."""
        if not isinstance(exc, ContextLengthError):
            return None
        results: list[StepScores | None] = []
        for request in requests:
            try:
                (result,) = self.scorer.score([request])
            except ContextLengthError:
                result = None
            results.append(result)
        return results

    def _end_too_long(self, job: _Job, node: int) -> None:
        """A path the PRM cannot read: it stays unscored and ends here (truncated), keeping the
        answer it already has, and the problem goes on with its other paths."""
        tree = job.tree
        job.too_long += 1
        if not tree.terminal[node]:
            tree.mark_terminal(node, truncated=True)

    def _requests(self, job: _Job, expand: Expand) -> list[GenerationRequest]:
        tree = job.tree
        sampling = self._full_sampling if expand.full_solution else self.config.sampling
        if expand.greedy:
            sampling = replace(sampling, temperature=0.0)
        requests = []
        paths = job.paths  # the frontier's paths, kept from the round that made it
        for node, count in expand.requests:
            serial = job.expansions.get(node, 0)
            job.expansions[node] = serial + 1
            requests.append(
                GenerationRequest(
                    question=tree.question,
                    steps=paths[node] if node in paths else tree.path_steps(node),
                    n=count,
                    sampling=sampling,
                    seed=mix_seed(job.seed, node, serial),
                    stop_at_step=not expand.full_solution,
                )
            )
        return requests

    def _batched(self, per_job, call, check, what: str, recover=None) -> dict[int, list]:
        """One batched backend call for all jobs; on failure, one call per job. A job whose own
        call fails is handed to ``recover(job, requests, exc)`` when given (its results, or None:
        the job fails)."""
        flat = [request for _, requests in per_job for request in requests]
        if not flat:
            return {}
        out: dict[int, list] = {}
        try:
            results = call(flat)
            check(flat, results)
            offset = 0
            for job, requests in per_job:
                out[id(job)] = results[offset : offset + len(requests)]
                offset += len(requests)
        except Exception as exc:

            def fail(job: _Job, requests: list, job_exc: BaseException) -> None:
                results = recover(job, requests, job_exc) if recover is not None else None
                if results is None:
                    job.error = f"{what} failed: {_describe(job_exc)}"
                else:
                    out[id(job)] = results

            if len(per_job) == 1 or backend_unreachable(exc):
                for job, requests in per_job:  # one by one cannot reach a server that is down
                    fail(job, requests, exc)
            else:
                for job, requests in per_job:
                    try:
                        results = call(requests)
                        check(requests, results)
                        out[id(job)] = results
                    except Exception as job_exc:
                        fail(job, requests, job_exc)
                        if backend_unreachable(job_exc):
                            exc = job_exc
                            break
                for job, requests in per_job:  # the jobs a down server left untried
                    if id(job) not in out and job.error is None:
                        fail(job, requests, exc)
        return out

    @staticmethod
    def _check_generations(requests: list[GenerationRequest], gens: list[Generation]) -> None:
        if len(gens) != len(requests):
            raise ValueError(f"policy returned {len(gens)} generations for {len(requests)} requests")
        for request, gen in zip(requests, gens):
            if len(gen.samples) != request.n:
                raise ValueError(f"policy returned {len(gen.samples)} samples, asked for {request.n}")

    @staticmethod
    def _check_scores(requests: list[ScoreRequest], results: list[StepScores]) -> None:
        if len(results) != len(requests):
            raise ValueError(f"scorer returned {len(results)} results for {len(requests)} requests")

    def _write_children(self, job, expand, requests, gens):
        """Add every sample as a child (or a chain of steps), charge the generations, and build
        the score request of every new path (the parent's steps plus the new ones)."""
        tree, ledger = job.tree, job.ledger
        size_before = len(tree)
        reply: list[list[int]] = []
        spans: list[tuple[int, int]] = []
        score_requests: list[ScoreRequest] = []
        question = tree.question
        cfg = self.config
        stop_on_answer = cfg.stop_on_answer
        # one step per sample: every child of the round is written into the tree at once
        parents: list[int] = []
        texts: list[str] = []
        sample_list: list = []
        generation_flops = self._policy_cost.generation_flops
        n = generated = computed = cached = flops = 0  # the round's requests, charged at once
        for (node, _), request, gen in zip(expand.requests, requests, gens, strict=True):
            n += request.n
            generated += gen.tokens_generated
            computed += gen.prompt_tokens_computed + gen.prompt_tokens_recomputed
            cached += gen.prompt_tokens_cached
            flops += generation_flops(
                cached=gen.prompt_tokens_cached,
                computed=gen.prompt_tokens_computed,
                sample_tokens=gen.sample_tokens(),
                recomputed=gen.prompt_tokens_recomputed,
            )
            samples = gen.samples
            if expand.full_solution:
                children = []
                for sample in samples:
                    first, last = self._add_chain(job, node, sample, request.sampling.delimiter)
                    new_steps = tuple(tree.step_text[i] for i in range(first, last + 1))
                    children.append(last)
                    spans.append((first, last))
                    path = request.steps + new_steps
                    score_requests.append(self._score_request(tree, question, path, last))
                reply.append(children)
                continue
            parents.extend([node] * len(samples))
            texts.extend([sample.text for sample in samples])
            sample_list.extend(samples)
        ledger.charge_generation(
            n=n, generated=generated, computed=computed, cached=cached, flops=flops, calls=len(requests)
        )
        if not parents:
            self.stats.nodes += len(tree) - size_before
            return reply, spans, score_requests
        first = tree.add_steps(
            parents,
            texts,
            [sample.token_ids for sample in sample_list],
            [sample.logprob for sample in sample_list],
            [sample.finish.value for sample in sample_list],
            [sample.token_logprobs for sample in sample_list],
        )
        depth, max_depth, step = tree.depth, cfg.max_depth, Finish.STEP
        for child, sample, text in zip(range(first, first + len(parents)), sample_list, texts):
            if (  # the common case, decided here: a step that does not end its path
                sample.finish is step
                and depth[child] < max_depth
                and not (stop_on_answer and ("\\boxed" in text or "\\fbox" in text))
                and text.strip()
                and not tree.repeats_recent_step(child)
            ):
                continue
            self._classify(job, child, sample.finish)
        child = first
        paths: dict[int, tuple[str, ...]] = {}
        for request, gen in zip(requests, gens):
            k = len(gen.samples)
            reply.append(list(range(child, child + k)))
            steps = request.steps
            for text in texts[child - first : child - first + k]:
                path = paths[child] = (*steps, text)
                score_requests.append(self._score_request(tree, question, path, child))
                child += 1
        job.paths = paths  # the next round expands these nodes, mostly: no walk up the tree
        spans.extend((node, node) for node in range(first, first + len(parents)))
        self.stats.nodes += len(tree) - size_before
        return reply, spans, score_requests

    def _score_request(self, tree: SearchTree, question: str, path: tuple[str, ...],
                       node: int) -> ScoreRequest:
        """The score request of the path ending at ``node``, with the policy's token
        log-probabilities along it for a scorer that reads them."""
        if not self._scorer_reads_logprobs:
            return ScoreRequest(question, path)
        lps = tree.token_logprobs
        return ScoreRequest(question, path, tuple(lps[i] for i in tree.path(node)))

    def _add_chain(self, job: _Job, node: int, sample, delimiter: str) -> tuple[int, int]:
        """Split a whole solution at the delimiter into a chain of step nodes (one tree write);
        the sample's tokens, their log-probabilities and its finish sit on the chain's last node."""
        tree = job.tree
        pieces = split_steps(sample.text, delimiter)
        inner = len(pieces) - 1
        first = len(tree)
        tree.add_steps(
            [node, *range(first, first + inner)],
            pieces,
            [*([()] * inner), sample.token_ids],
            [*([0.0] * inner), sample.logprob],
            [*([Finish.STEP.value] * inner), sample.finish.value],
            [*([()] * inner), sample.token_logprobs],
        )
        last = first + inner
        self._classify(job, last, sample.finish, whole_solution=True)
        return first, last

    def _classify(self, job: _Job, node: int, finish: Finish, whole_solution: bool = False) -> None:
        """Decide whether ``node`` ends its path, and extract and group its answer."""
        tree, cfg = job.tree, self.config
        text = tree.step_text[node]
        empty = not text.strip()
        at_max = tree.depth[node] >= cfg.max_depth and not whole_solution
        has_box = cfg.stop_on_answer and ("\\boxed" in text or "\\fbox" in text)
        looped = not whole_solution and not empty and tree.repeats_recent_step(node)
        if not (whole_solution or finish is not Finish.STEP or empty or at_max or has_box or looped):
            return
        answer = extract_answer(cfg.sampling.delimiter.join(tree.path_steps(node)))
        truncated = finish is Finish.LENGTH or (answer is None and (empty or at_max or looped))
        group = self._group(job, answer) if answer is not None else -1
        tree.mark_terminal(node, truncated=truncated, answer=answer, group=group)

    def _canonical(self, answer: str) -> str:
        """The matcher's canonical form of ``answer``, remembered (answers repeat across samples)."""
        known = self._canonical_forms.get(answer)
        if known is None:
            if len(self._canonical_forms) >= 100_000:
                self._canonical_forms.clear()
            known = self._canonical_forms[answer] = self.matcher.canonicalize(answer)
        return known

    def _group(self, job: _Job, answer: str) -> int:
        canonical = self._canonical(answer)
        group = job.groups.get(canonical)
        if group is None:
            tree = job.tree
            for other, index in list(job.groups.items()):
                if self.matcher.same(canonical, other):
                    group = index
                    break
            else:
                group = tree.add_answer_group(answer)
            job.groups[canonical] = group
        return group

    def _write_scores(self, job: _Job, spans, requests, results) -> None:
        """Write the scores of each path's new steps ``first..last`` (a chain's ids are
        consecutive) and charge the round's score requests to the job at once; a path the PRM
        could not read (result None) ends unscored."""
        tree = job.tree
        charged: list[tuple[int, int, int]] = []
        computed = cached = 0
        parent, score, path_min, path_sum, path_prod = (
            tree.parent, tree.score, tree.path_min, tree.path_sum, tree.path_prod
        )
        for (first, last), request, result in zip(spans, requests, results):
            if result is None:
                self._end_too_long(job, last)
                continue
            try:  # one new step (the common case) is checked in O(1)
                if first == last:
                    values = [_last_score(request, result)]
                else:
                    values = check_scores(request, result)[first - last - 1 :]
            except Exception as exc:
                job.error = f"scorer failed: {_describe(exc)}"
                break
            computed += result.tokens_computed
            cached += result.tokens_cached
            charged.append((result.tokens_cached, result.tokens_computed, len(request.steps)))
            for node, value in zip(range(first, last + 1), values):
                up = parent[node]  # SearchTree.set_score, inlined (paths are scored root-first)
                score[node] = value
                low = path_min[up]
                path_min[node] = value if value < low else low
                path_sum[node] = path_sum[up] + value
                path_prod[node] = path_prod[up] * value
        if charged:
            flops = self._scorer_cost.scoring_flops_total(charged)
            job.ledger.charge_scoring(computed=computed, cached=cached, flops=flops, calls=len(charged))

    # ------------------------------------------------------------------ results
    def _result(self, job: _Job) -> SearchResult:
        tree, strategy = job.tree, job.strategy
        job.ledger.wall_s = time.perf_counter() - job.started
        choice = job.choice
        node = choice.node if choice is not None else ROOT
        aggregation = Aggregation.parse(getattr(strategy.config, "aggregation", Aggregation.MIN))
        steps = tree.path_steps(node)
        answer = tree.answer[node]
        if answer is None and steps:
            answer = extract_answer(self.config.sampling.delimiter.join(steps))
        votes: list[Vote] = []
        candidates: tuple[Candidate, ...] = ()
        score = float("nan")
        if choice is not None:
            votes = tally(tree, choice.candidates, aggregation)
            candidates = tuple(
                Candidate(c, tree.answer[c], int(tree.answer_group[c]), path_score(tree, c, aggregation))
                for c in choice.candidates
            )
            if node != ROOT:
                score = path_score(tree, node, aggregation)
        return SearchResult(
            question=tree.question,
            strategy=strategy.name,
            answer=answer if job.error is None else None,
            node=node,
            steps=steps,
            step_scores=tuple(tree.step_scores(node).tolist()),
            score=score,
            votes=votes,
            tree=tree,
            ledger=job.ledger,
            seed=job.seed,
            error=job.error,
            candidates=candidates if job.error is None else (),
            notes=_too_long_notes(job.too_long),
            report=dict(choice.report) if choice is not None and job.error is None else {},
        )


def _last_score(request: ScoreRequest, result: StepScores) -> float:
    """The score of a path's last step, checked: a 1-D array of one probability per step (the
    common case, in a few attribute reads), else `check_scores`'s full check and its error."""
    raw = result.scores
    if isinstance(raw, np.ndarray) and raw.ndim == 1 and raw.shape[0] == len(request.steps) > 0:
        value = float(raw[-1])
        if 0.0 <= value <= 1.0:  # also rejects NaN
            return value
    return check_scores(request, result)[-1]


def _too_long_notes(count: int) -> list[str]:
    """The note of a problem whose paths outgrew the PRM's context (none when none did)."""
    if not count:
        return []
    return [
        f"{count} path(s) outgrew the PRM's context and ended there, unscored (truncated); use a "
        "PRM with a longer context, or lower max_depth / the step and solution token limits"
    ]
