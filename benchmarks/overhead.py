"""Driver overhead with instant backends: how much time orchestration adds per expanded node.

The backends here answer from precomputed tables, and the time spent inside them is measured
and subtracted, so the figure is the driver's own cost (tree writes, strategy logic, request
building, ledger), the part that must stay invisible next to a ~1 ms GPU step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prmsearch.api import Searcher
from prmsearch.policies.base import Finish, Generation, GenerationRequest, StepOutput
from prmsearch.scorers.base import ScoreRequest, StepScores


class InstantPolicy:
    """Answers every request from a table: ``pool`` distinct steps, a boxed answer at ``depth``."""

    num_parameters = 1_000_000

    def __init__(self, depth: int = 10, pool: int = 64, answers: int = 4) -> None:
        self.depth = depth
        self.steps = [StepOutput(f"step {k}", (k, k + 1, k + 2), -1.0, Finish.STEP) for k in range(pool)]
        self.finals = [
            StepOutput(f"\\boxed{{{k % answers}}}", (k,), -1.0, Finish.EOS) for k in range(pool)
        ]
        self.solutions = [
            StepOutput(
                "\n\n".join([*(f"step {(k + d) % pool}" for d in range(depth - 1)), final.text]),
                tuple(range(3 * depth)),
                -1.0,
                Finish.EOS,
            )
            for k, final in enumerate(self.finals)
        ]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        pool = len(self.steps)
        out = []
        for request in requests:
            if not request.stop_at_step:
                table = self.solutions
            elif len(request.steps) + 1 >= self.depth:
                table = self.finals
            else:
                table = self.steps
            seed = request.seed or 0
            samples = tuple(table[(seed + i) % pool] for i in range(request.n))
            out.append(Generation(samples, prompt_tokens_computed=3 * len(request.steps) + 5))
        return out


class InstantScorer:
    """Returns a precomputed score array per (path length, last step)."""

    num_parameters = 1_000_000

    def __init__(self, max_depth: int = 64, pool: int = 64, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.index: dict[str, int] = {}
        self.tables = [
            [np.full(length, value) for value in rng.uniform(0.05, 0.95, pool)]
            for length in range(max_depth + 1)
        ]
        for k in range(pool):
            self.index[f"step {k}"] = k
        for k in range(pool):
            self.index[f"\\boxed{{{k % 4}}}"] = k

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        index, tables = self.index, self.tables
        return [
            StepScores(tables[len(r.steps)][index.get(r.steps[-1], 0)], len(r.steps[-1]))
            for r in requests
        ]


@dataclass(frozen=True)
class OverheadFigures:
    """Driver overhead of one configuration."""

    label: str
    problems: int
    nodes: int
    rounds: int
    wall_s: float
    backend_s: float
    cpu_s: float = float("nan")

    @property
    def driver_us_per_node(self) -> float:
        return 1e6 * (self.wall_s - self.backend_s) / max(1, self.nodes)

    @property
    def cpu_us_per_node(self) -> float:
        """The process's CPU time per node, driver and instant backends together: on a shared
        machine it counts only this process's work, so two checkouts compare by it when wall
        times are drowned by other jobs (the backends are the same code in both)."""
        return 1e6 * self.cpu_s / max(1, self.nodes)

    def row(self) -> str:
        return (
            f"| {self.label} | {self.problems} | {self.nodes:,} | {self.rounds} | "
            f"{self.wall_s:.2f} | {self.backend_s:.2f} | {self.cpu_us_per_node:.1f} | "
            f"{self.driver_us_per_node:.1f} |"
        )


def measure(label: str, strategy: str, problems: int, depth: int, **options) -> OverheadFigures:
    """Run ``strategy`` over ``problems`` questions with instant backends and time the driver."""
    searcher = Searcher(InstantPolicy(depth=depth), InstantScorer(), strategy, max_depth=depth, **options)
    questions = [f"problem {i}" for i in range(problems)]
    cpu_start, start = time.process_time(), time.perf_counter()
    searcher.run(questions)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    stats = searcher.last_stats
    assert stats is not None
    return OverheadFigures(
        label, problems, stats.nodes, stats.rounds, wall, stats.backend_s, cpu
    )


HEADER = (
    "| configuration | problems | nodes | rounds | wall s | backend s | CPU us/node (all) "
    "| driver us/node |\n"
    "|---|---|---|---|---|---|---|---|"
)


def run_overhead_suite(problems: int = 1000) -> list[OverheadFigures]:
    """The figures quoted in the README: beam N=64 width 4 depth 10, and MCTS with 64 generations."""
    return [
        measure("beam N=64 width=4 depth=10", "beam", problems, 10, n=64, width=4),
        measure(
            "mcts 64 generations, width 4, 4 leaves/round", "mcts", problems, 10,
            n=64, expansion_width=4, leaves_per_round=4,
        ),
        measure("best_of_n N=64 depth=10", "best_of_n", problems, 10, n=64),
        measure("particle_filter N=64 depth=10", "particle_filter", problems, 10, n=64),
    ]
