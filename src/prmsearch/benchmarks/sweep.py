"""Strategy sweeps: every (strategy, budget, seed) over a dataset, resumable, row by row.

The policy and scorer are loaded once and shared by every cell of the sweep. Each cell runs its
pending problems through one :class:`~prmsearch.api.Searcher` in chunks (one batched driver run
per chunk), and every finished problem is appended to ``results.jsonl`` at once.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prmsearch.api import Searcher, resolve_policy, resolve_scorer
from prmsearch.benchmarks.results import ResultRow, ResultsFolder, RowKey
from prmsearch.benchmarks.subsample import append_subsampled
from prmsearch.benchmarks.sweep_config import SweepConfig
from prmsearch.policies.base import Policy
from prmsearch.scorers.base import Scorer
from prmsearch.search.driver import SearchResult
from prmsearch.seeding import problem_seed


@dataclass(frozen=True)
class SweepProblem:
    """One problem of a sweep: an id, the question and the gold answer."""

    qid: str
    question: str
    gold: str


def build_backends(config: SweepConfig) -> tuple[Policy, Scorer]:
    """The policy and scorer of a sweep, loaded once."""
    if config.policy_backend and config.policy:
        policy = resolve_policy(config.policy_backend, model=config.policy)
    else:
        policy = resolve_policy(config.policy)
    return policy, resolve_scorer(config.prm, config.prm_family)


def make_searcher(
    config: SweepConfig, policy: Policy, scorer: Scorer, strategy: str, budget: int, seed: int, matcher
) -> Searcher:
    """The searcher of one sweep cell (strategy, budget, seed) over loaded backends."""
    return Searcher(
        policy,
        scorer,
        strategy,
        sampling=config.sampling(),
        max_depth=config.max_depth,
        seed=seed,
        matcher=matcher,
        **config.strategy_options(strategy, budget),
    )


def result_row(
    problem: SweepProblem,
    strategy: str,
    budget: int,
    seed: int,
    result: SearchResult,
    grade: Callable[[str | None, str], bool],
) -> ResultRow:
    """The results.jsonl row of one finished search."""
    data = result.to_dict()
    correct = False
    if result.error is None and result.answer is not None:
        correct = bool(grade(result.answer, problem.gold))
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
        candidates=tuple(
            {"answer": c.answer, "group": c.group, "score": None if math.isnan(c.score) else float(c.score)}
            for c in result.candidates
        ),
    )


def error_row(problem: SweepProblem, strategy: str, budget: int, seed: int, error: str) -> ResultRow:
    """A row recording that a problem could not be searched at all."""
    return ResultRow(
        qid=problem.qid, strategy=strategy, budget=budget, seed=seed, answer=None,
        gold=problem.gold, correct=False, score=None, error=error,
    )


def run_sweep(
    config: SweepConfig,
    problems: Sequence[SweepProblem],
    out: Path,
    *,
    resume: bool = False,
    policy: Policy | None = None,
    scorer: Scorer | None = None,
    grade: Callable[[str | None, str], bool] | None = None,
    progress: bool = True,
    matcher=None,
    runner=None,
) -> ResultsFolder:
    """Run every cell of ``config`` over ``problems``, appending rows to ``out/results.jsonl``.

    ``runner`` (e.g. :class:`~prmsearch.benchmarks.distributed.RayRunner`) runs the chunks
    elsewhere and hands their rows back; this process stays the only writer of the folder.
    """
    folder = ResultsFolder(Path(out))
    done = folder.open(config.to_dict(), resume=resume)
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
    total = sum(len(p) for *_, p in todo)
    if total:
        _run_todo(config, todo, folder, done, policy, scorer, grade, matcher, runner, progress)
    if config.subsample_bon:
        append_subsampled(folder, config, done, grade)
    return folder


def clear_backend_caches(*backends: Any) -> None:
    """Start a cell with cold prefix and score caches, so no cell is charged less because an
    earlier cell (e.g. the same samples under another selection rule) warmed them."""
    for backend in backends:
        clear = getattr(backend, "clear_caches", None)
        if callable(clear):
            clear()


def _run_todo(config, todo, folder, done: set[RowKey], policy, scorer, grade, matcher, runner, progress):
    bar = _progress_bar(sum(len(p) for *_, p in todo), progress)

    def emit(row: ResultRow) -> None:  # the single writer: a key is never written twice
        key = row.key
        if key in done:
            return
        folder.append(row)
        done.add(key)
        bar.update(1)

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
        if policy is None or scorer is None:
            policy, scorer = build_backends(config)
        cell: tuple[str, int, int] | None = None
        for strategy, budget, seed, chunk in chunks:
            if cell != (strategy, budget, seed):  # one searcher per cell, as its chunks are adjacent
                cell = (strategy, budget, seed)
                clear_backend_caches(policy, scorer)
                searcher = make_searcher(config, policy, scorer, *cell, matcher)
                bar.set_description(f"{strategy} n={budget} seed={seed}")
            chunk_rows(searcher, chunk, strategy, budget, seed, grade, emit)
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
) -> None:
    """Search one chunk in one batched run and ``emit`` each problem's row as it finishes.

    A failure the driver could not contain gives the problems not yet emitted an error row.
    """
    emitted: set[int] = set()

    def write(index: int, result: SearchResult) -> None:
        if index not in emitted:
            emitted.add(index)
            emit(result_row(chunk[index], strategy, budget, seed, result, grade))

    seeds = [problem_seed(seed, p.question) for p in chunk]
    try:
        searcher.run([p.question for p in chunk], seeds=seeds, on_result=write)
    except Exception as exc:  # a failure the driver could not contain: record and go on
        message = f"sweep failed: {type(exc).__name__}: {exc}"
        for index, problem in enumerate(chunk):
            if index not in emitted:
                emitted.add(index)
                emit(error_row(problem, strategy, budget, seed, message))


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
    return tqdm(total=total, file=sys.stderr, unit="run", dynamic_ncols=True, mininterval=0.5)


def timestamped_folder(root: str | Path, dataset: str) -> Path:
    """A fresh default output folder, ``root/<dataset>-<UTC time>``."""
    return Path(root) / f"{dataset}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
