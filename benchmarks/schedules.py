"""The driver's schedules side by side in one process: lock-step rounds, overlapped groups and
the asynchronous flow (`prmsearch.search.driver.RunConfig`).

Each schedule runs in turn, ``repeats`` times, on the same backends, problems and seeds, with
cold caches before every run. The figure is problems per second (median) and its ratio to the
first schedule, with the policy's busy time, so a reader sees which backend bounds the run; the
answers of all runs are compared (they agree when the backends' samples do not depend on batch
composition).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prmsearch.api import Searcher

#: the schedules compared by default: label -> `Searcher` keyword arguments
DEFAULT_SCHEDULES: dict[str, dict[str, Any]] = {
    "rounds": {"schedule": "rounds"},
    "overlap 2": {"schedule": "rounds", "overlap": 2},
    "async": {"schedule": "async"},
}


@dataclass(frozen=True)
class ScheduleFigures:
    """Medians over ``repeats`` runs of one strategy under each schedule (first = baseline)."""

    strategy: str
    problems: int
    labels: tuple[str, ...]
    problems_per_s: tuple[float, ...]
    policy_busy_s: tuple[float, ...]
    scorer_busy_s: tuple[float, ...]
    policy_calls: tuple[int, ...]
    same_answers: bool

    def ratios(self) -> tuple[float, ...]:
        """Each schedule's throughput over the first's."""
        return tuple(pps / self.problems_per_s[0] for pps in self.problems_per_s)

    def header(self) -> str:
        cells = ["strategy", "problems"]
        for label in self.labels:
            cells += [f"{label} problems/s", f"{label} policy / PRM busy s"]
        cells += [f"{label} / {self.labels[0]}" for label in self.labels[1:]]
        cells.append("same answers")
        return "| " + " | ".join(cells) + " |\n" + "|---" * len(cells) + "|"

    def row(self) -> str:
        cells = [self.strategy, str(self.problems)]
        for pps, policy, scorer in zip(self.problems_per_s, self.policy_busy_s, self.scorer_busy_s):
            cells += [f"{pps:.2f}", f"{policy:.1f} / {scorer:.1f}"]
        cells += [f"{ratio:.2f}" for ratio in self.ratios()[1:]]
        cells.append("yes" if self.same_answers else "no")
        return "| " + " | ".join(cells) + " |"


def measure_schedules(
    policy,
    scorer,
    questions: Sequence[str],
    strategy: str,
    schedules: Mapping[str, Mapping[str, Any]] | None = None,
    repeats: int = 2,
    clear_caches: Callable[[], None] | None = None,
    **options: Any,
) -> ScheduleFigures:
    """Run ``strategy`` under each schedule in turn, ``repeats`` rounds of all of them."""
    schedules = dict(schedules or DEFAULT_SCHEDULES)
    if not schedules:
        raise ValueError("give at least one schedule")
    runs: dict[str, list[tuple[float, float, float, int, tuple]]] = {label: [] for label in schedules}
    for _ in range(repeats):
        for label, settings in schedules.items():
            if clear_caches is not None:
                clear_caches()
            searcher = Searcher(policy, scorer, strategy, **settings, **options)
            start = time.perf_counter()
            results = searcher.run(list(questions))
            wall = time.perf_counter() - start
            stats = searcher.last_stats
            assert stats is not None
            answers = tuple(r.answer for r in results)
            runs[label].append((wall, stats.policy_s, stats.scorer_s, stats.policy_batches, answers))

    def median(label: str, index: int) -> float:
        return statistics.median(run[index] for run in runs[label])

    labels = tuple(schedules)
    return ScheduleFigures(
        strategy=strategy,
        problems=len(questions),
        labels=labels,
        problems_per_s=tuple(len(questions) / median(label, 0) for label in labels),
        policy_busy_s=tuple(median(label, 1) for label in labels),
        scorer_busy_s=tuple(median(label, 2) for label in labels),
        policy_calls=tuple(int(median(label, 3)) for label in labels),
        same_answers=len({run[4] for label in labels for run in runs[label]}) == 1,
    )
