"""Lock step against overlapped rounds (``RunConfig.overlap``), side by side in one process.

Each configuration runs alternately with ``overlap=1`` (every problem waits for the whole round)
and ``overlap=K`` (K groups take turns, so the PRM scores one group while the policy generates
another), on the same backends, problems and seeds, with cold caches before every run. The answers
must agree; the figure is problems per second, with each backend's busy time, so a reader sees
whether the policy or the PRM bounds the run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prmsearch.api import Searcher


@dataclass(frozen=True)
class OverlapFigures:
    """Medians over ``repeats`` alternating runs of one strategy, lock step vs overlapped."""

    strategy: str
    overlap: int
    problems: int
    lock_step_pps: float
    overlapped_pps: float
    lock_step_policy_s: float
    lock_step_scorer_s: float
    overlapped_policy_s: float
    same_answers: bool

    @property
    def ratio(self) -> float:
        return self.overlapped_pps / self.lock_step_pps

    def row(self) -> str:
        return (
            f"| {self.strategy} | {self.problems} | {self.lock_step_pps:.2f} | {self.overlapped_pps:.2f} "
            f"| {self.ratio:.2f} | {self.lock_step_policy_s:.1f} / {self.lock_step_scorer_s:.1f} "
            f"| {self.overlapped_policy_s:.1f} | {'yes' if self.same_answers else 'no'} |"
        )


HEADER = (
    "| strategy | problems | lock step problems/s | overlapped problems/s | ratio | lock step policy / PRM s "
    "| overlapped policy s | same answers |\n|---|---|---|---|---|---|---|---|"
)


def measure_overlap(
    policy,
    scorer,
    questions: Sequence[str],
    strategy: str,
    overlap: int = 2,
    repeats: int = 2,
    clear_caches: Callable[[], None] | None = None,
    **options,
) -> OverlapFigures:
    """Run ``strategy`` lock step and overlapped, alternately, ``repeats`` times each."""
    runs: dict[int, list[tuple[float, float, float, list]]] = {1: [], overlap: []}
    for _ in range(repeats):
        for groups in (1, overlap):
            if clear_caches is not None:
                clear_caches()
            searcher = Searcher(policy, scorer, strategy, overlap=groups, **options)
            start = time.perf_counter()
            results = searcher.run(list(questions))
            wall = time.perf_counter() - start
            stats = searcher.last_stats
            assert stats is not None
            runs[groups].append((wall, stats.policy_s, stats.scorer_s, [r.answer for r in results]))

    def median(groups: int, index: int) -> float:
        return statistics.median(run[index] for run in runs[groups])

    answers = {tuple(run[3]) for group in runs.values() for run in group}
    return OverlapFigures(
        strategy=strategy,
        overlap=overlap,
        problems=len(questions),
        lock_step_pps=len(questions) / median(1, 0),
        overlapped_pps=len(questions) / median(overlap, 0),
        lock_step_policy_s=median(1, 1),
        lock_step_scorer_s=median(1, 2),
        overlapped_policy_s=median(overlap, 1),
        same_answers=len(answers) == 1,
    )
