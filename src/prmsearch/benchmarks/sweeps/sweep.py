"""Strategy sweeps: every (strategy, budget, seed) over a dataset, resumable, row by row.

The policy and scorer are loaded once and shared by every cell of the sweep. Each cell runs its
pending problems through one :class:`~prmsearch.api.Searcher` in chunks (one batched driver run
per chunk), and every finished problem is appended to ``results.jsonl`` at once.

With ``config.save_trees`` each problem's search tree is written to ``trees/`` just before its
row (:mod:`prmsearch.benchmarks.sweeps.trees` says why a resume then neither loses nor duplicates one).

Every problem of every cell ends with exactly one row: a search that failed gets a row with its
``error``. A resume runs the problems without a row; with ``retry_errors`` it also runs again the
problems whose row has an error, and the new row replaces the old one (see
:mod:`prmsearch.benchmarks.sweeps.results` for why that is safe to kill at any moment).

A dead server (or a dead in-process engine): once ``config.max_consecutive_failures`` problems
in a row ended in a connection-type error (:func:`is_connection_error`), the sweep stops with
:class:`ServerDownError` rather than spending the retries of every remaining problem; the
problems not yet run have no row, and a resume with ``retry_errors`` continues.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prmsearch.api import Searcher, resolve_policy, resolve_scorer
from prmsearch.backend_errors import CONNECTION_KINDS, failure_kind
from prmsearch.benchmarks.sweeps.config import SweepConfig
from prmsearch.benchmarks.sweeps.results import (
    ResultRow,
    ResultsFolder,
    ResultsFolderError,
    RowKey,
    problem_digests,
)
from prmsearch.benchmarks.sweeps.siblings import append_sibling_rows
from prmsearch.benchmarks.sweeps.trees import TreesFolder
from prmsearch.policies.base import Policy
from prmsearch.scorers.base import Scorer
from prmsearch.search.driver import SearchResult
from prmsearch.seeding import problem_seed
from prmsearch.tree_graph import result_graph


@dataclass(frozen=True)
class SweepProblem:
    """One problem of a sweep: an id, the question and the gold answer.

    A blank id or question is refused here, so that it cannot fail the whole chunk it would be
    searched with.
    """

    qid: str
    question: str
    gold: str

    def __post_init__(self) -> None:
        for name in ("qid", "question"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"SweepProblem.{name} must be a non-empty string, got {value!r:.80}")


def sweep_problems(dataset: Iterable[Any]) -> list[SweepProblem]:
    """A loaded dataset's problems (:func:`prmsearch.benchmarks.load_dataset`) as sweep problems."""
    return [SweepProblem(str(p.id), p.question, str(p.answer)) for p in dataset]


def is_connection_error(kind: str | None) -> bool:
    """Whether a row's ``error_kind`` says the backend could not be reached, timed out or failed
    as a server (`prmsearch.backend_errors.CONNECTION_KINDS`), not that the problem is bad (a 4xx
    refusal, a too-long question or a broken strategy is the problem's)."""
    return kind in CONNECTION_KINDS


class ServerDownError(RuntimeError):
    """The sweep stopped early: ``failures`` problems in a row failed with a connection-type
    error (the last one's error is ``last_error``); rows written so far are in ``folder``."""

    def __init__(self, folder: Path, failures: int, last_error: str) -> None:
        super().__init__(
            f"{failures} problems in a row failed with a connection error or a dead engine (the "
            f"last: {last_error[:300]}); the backend looks down, so the sweep stopped. When it is "
            f"back (a server restarted, or a new process for an engine that died), "
            f"run_sweep(..., resume=True, retry_errors=True) on {folder} continues."
        )
        self.folder = folder
        self.failures = failures
        self.last_error = last_error


@dataclass
class FailureStreak:
    """Counts problems in a row whose rows have a connection-type error (any other row resets)."""

    limit: int
    count: int = 0
    last_error: str = ""

    def update(self, row: ResultRow) -> bool:
        """Count ``row``; True once ``limit`` (> 0) problems in a row failed to connect."""
        if is_connection_error(row.error_kind):
            self.count += 1
            self.last_error = str(row.error)
        else:
            self.count = 0
        return 0 < self.limit <= self.count


def build_backends(config: SweepConfig) -> tuple[Policy, Scorer]:
    """The policy and scorer of a sweep, loaded once."""
    backend = config.policy_backend if config.policy else None
    policy = resolve_policy(config.policy, backend, **config.policy_args)
    return policy, resolve_scorer(config.prm, config.prm_family, config.prm_backend, **config.prm_args)


def make_searcher(
    config: SweepConfig, policy: Policy, scorer: Scorer, strategy: str, budget: int, seed: int, matcher
) -> Searcher:
    """The searcher of one sweep cell (strategy, budget, seed) over loaded backends."""
    return Searcher(
        policy,
        scorer,
        config.strategy_at(strategy, budget),
        sampling=config.sampling(),
        max_depth=config.max_depth,
        overlap=config.overlap,
        schedule=config.schedule,
        policy_logprobs=config.policy_logprobs,
        seed=seed,
        matcher=matcher,
    )


def result_row(
    problem: SweepProblem,
    strategy: str,
    budget: int,
    seed: int,
    result: SearchResult,
    grade: Callable[[str | None, str], bool],
    keep_tree: bool = False,
) -> ResultRow:
    """The results.jsonl row of one finished search (with its tree attached when ``keep_tree``)."""
    data = result.to_dict()
    correct = False
    if result.error is None and result.answer is not None:
        correct = bool(grade(result.answer, problem.gold))
    tree = None
    if keep_tree:
        tree = result_graph(
            result, qid=problem.qid, budget=budget, seed=seed, gold=problem.gold, correct=correct
        )
    return ResultRow(
        qid=problem.qid,
        strategy=strategy,
        budget=budget,
        seed=seed,
        answer=result.answer,
        gold=problem.gold,
        correct=correct,
        score=data["score"],
        steps=tuple(data["steps"]),
        step_scores=tuple(data["step_scores"]),
        ledger=data["ledger"],
        error=result.error,
        error_kind=result.error_kind,
        candidates=tuple(
            {"answer": c.answer, "group": c.group, "score": None if math.isnan(c.score) else float(c.score)}
            for c in result.candidates
        ),
        report=dict(result.report) or None,
        tree=tree,
    )


def error_row(problem: SweepProblem, strategy: str, budget: int, seed: int, error: str,
              kind: str = "error") -> ResultRow:
    """A row recording that a problem could not be searched at all (``kind``: its error kind)."""
    return ResultRow(
        qid=problem.qid, strategy=strategy, budget=budget, seed=seed, answer=None,
        gold=problem.gold, correct=False, score=None, error=error, error_kind=kind,
    )


def run_sweep(
    config: SweepConfig,
    problems: Sequence[SweepProblem],
    out: str | Path,
    *,
    resume: bool = False,
    retry_errors: bool = False,
    policy: Policy | None = None,
    scorer: Scorer | None = None,
    backends: Callable[[], tuple[Policy, Scorer]] | None = None,
    grade: Callable[[str | None, str], bool] | None = None,
    progress: bool = True,
    matcher=None,
    runner=None,
    set_aside_damaged: bool = False,
) -> ResultsFolder:
    """Run every cell of ``config`` over ``problems``, appending rows to ``out/results.jsonl``.

    ``resume`` runs only the problems without a row; ``retry_errors`` (with ``resume``) also
    runs again those whose row has an error, each new row replacing the old one.
    ``policy``/``scorer`` are used as given; otherwise ``backends()`` (default: from ``config``)
    builds them, only when something is left to run. ``runner`` (e.g.
    :class:`~prmsearch.benchmarks.sweeps.distributed.RayRunner`) runs the chunks elsewhere and hands
    their rows back; this process stays the only writer of the folder (it holds the folder's
    lock until it returns). ``set_aside_damaged`` moves damaged lines of the results file to its
    side file so that their problems run again (otherwise they are an error naming them).

    Raises :class:`ServerDownError` when ``config.max_consecutive_failures`` problems in a row
    failed with a connection-type error (the rows written so far are kept).
    """
    if retry_errors and not resume:
        raise ValueError("retry_errors=True re-runs the errored rows of an earlier run; it needs resume=True")
    if config.save_trees and runner is not None:
        raise ValueError(
            "save_trees keeps the trees of searches run in this process; it cannot be used with a runner"
        )
    folder = ResultsFolder(Path(out))
    digests = problem_digests((p.qid, p.question, p.gold) for p in problems)
    done = folder.open(config.to_dict(), resume=resume, set_aside_damaged=set_aside_damaged,
                       problems=digests)
    try:
        _fill(config, problems, folder, done, retry_errors, policy, scorer, backends, grade, matcher,
              runner, progress)
    finally:
        try:
            folder.compact()  # one row per key on disk, once the replacements are written
        finally:
            folder.close()  # the lock: another process may now resume this folder
    return folder


def _fill(config, problems, folder, done, retry_errors, policy, scorer, backends, grade, matcher, runner,
          progress) -> None:
    """Run what the open ``folder`` lacks (and what failed, with ``retry_errors``)."""
    if retry_errors:
        done -= folder.error_keys()  # run again; the new row supersedes the old one
    if grade is None:
        from prmsearch.benchmarks.grading import is_equivalent

        grade = is_equivalent
    if matcher is None:
        from prmsearch.benchmarks.grading import search_matcher

        matcher = search_matcher()
    todo: list[tuple[str, int, int, list[SweepProblem]]] = []
    for strategy, budget, seed in config.cells():
        pending = [p for p in problems if (p.qid, strategy, budget, seed) not in done]
        if pending:
            todo.append((strategy, budget, seed, pending))
    if sum(len(p) for *_, p in todo):
        build = _backend_factory(config, policy, scorer, backends)
        _run_todo(config, todo, folder, done, build, grade, matcher, runner, progress)
    if config.share_bon_samples:
        append_sibling_rows(folder, config, done, grade)


def _backend_factory(config: SweepConfig, policy, scorer, backends) -> Callable[[], tuple[Policy, Scorer]]:
    """What gives the sweep its backends: the objects passed in, else ``backends``, else the
    config's (called only when there is work)."""
    if policy is not None and scorer is not None:
        return lambda: (policy, scorer)
    return backends or (lambda: build_backends(config))


def clear_backend_caches(*backends: Any) -> None:
    """Start a cell with cold prefix and score caches, so no cell is charged less because an
    earlier cell (e.g. the same samples under another selection rule) warmed them."""
    for backend in backends:
        clear = getattr(backend, "clear_caches", None)
        if callable(clear):
            clear()


def _run_todo(config, todo, folder, done: set[RowKey], build, grade, matcher, runner, progress):
    """Run the pending chunks of ``todo`` (here with the backends of ``build()``, or on ``runner``)
    and append each row as it comes; stop with :class:`ServerDownError` on a dead server."""
    bar = _progress_bar(sum(len(p) for *_, p in todo), progress)
    streak = FailureStreak(config.max_consecutive_failures)
    trees = TreesFolder.of_run(folder.path) if config.save_trees else None

    def emit(row: ResultRow) -> None:  # the single writer: a key is written once per run
        key = row.key
        if key in done:
            return
        if trees is not None and row.tree is not None:
            trees.write(key, row.tree)  # before its row: a row never lacks its tree
        folder.append(row)
        done.add(key)
        bar.update(1)
        if streak.update(row):
            raise ServerDownError(folder.path, streak.count, streak.last_error)

    try:
        chunks = [
            (strategy, budget, seed, pending[start : start + config.chunk])
            for strategy, budget, seed, pending in todo
            for start in range(0, len(pending), config.chunk)
        ]
        if runner is not None:
            bar.set_description(runner.describe())
            runner.run(config, chunks, emit, grade=grade, matcher=matcher)
            return
        policy, scorer = build()
        cell: tuple[str, int, int] | None = None
        for strategy, budget, seed, chunk in chunks:
            if cell != (strategy, budget, seed):  # one searcher per cell, as its chunks are adjacent
                cell = (strategy, budget, seed)
                clear_backend_caches(policy, scorer)
                searcher = make_searcher(config, policy, scorer, *cell, matcher)
                bar.set_description(f"{strategy} n={budget} seed={seed}")
            chunk_rows(searcher, chunk, strategy, budget, seed, grade, emit, keep_tree=config.save_trees)
    finally:
        bar.close()


def chunk_rows(
    searcher: Searcher,
    chunk: Sequence[SweepProblem],
    strategy: str,
    budget: int,
    seed: int,
    grade: Callable[[str | None, str], bool],
    emit: Callable[[ResultRow], None],
    *,
    keep_tree: bool = False,
) -> None:
    """Search one chunk in one batched run and ``emit`` each problem's row as it finishes (with
    its tree attached when ``keep_tree``).

    A failure the driver could not contain gives the problems not yet emitted an error row;
    :class:`ServerDownError` (raised by ``emit``) stops the chunk and leaves them without one.
    """
    emitted: set[int] = set()

    def write(index: int, result: SearchResult) -> None:
        if index not in emitted:
            emitted.add(index)
            emit(result_row(chunk[index], strategy, budget, seed, result, grade, keep_tree))

    seeds = [problem_seed(seed, p.question) for p in chunk]
    try:
        searcher.run([p.question for p in chunk], seeds=seeds, on_result=write)
    except (ServerDownError, ResultsFolderError):  # a dead server, a disk that cannot take the row
        raise
    except Exception as exc:  # a failure the driver could not contain: record and go on
        message = f"sweep failed: {type(exc).__name__}: {exc}"
        for index, problem in enumerate(chunk):
            if index not in emitted:
                emitted.add(index)
                emit(error_row(problem, strategy, budget, seed, message, failure_kind(exc)))


class _NullBar:
    def update(self, n: int) -> None:
        pass

    def set_description(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return _NullBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NullBar()
    # smoothing=0: the rate since the start, not of the last few updates; a batched chunk finishes its
    # problems in bursts, so the recent rate swings between zero and a burst and the estimate with it
    return tqdm(total=total, file=sys.stderr, unit="problem", dynamic_ncols=True, mininterval=0.5,
                smoothing=0)


def timestamped_folder(root: str | Path, dataset: str) -> Path:
    """A fresh default output folder, ``root/<dataset>-<UTC time>``."""
    return Path(root) / f"{dataset}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
