"""Benchmarking: datasets, grading, strategy x budget x seed sweeps with resumable results, and
the reports that compare strategies at equal compute.

The names below are the public API (importing them never imports torch); the submodules hold the
rest. A typical sweep::

    from prmsearch.benchmarks import SweepConfig, load_dataset, run_sweep, sweep_problems
    config = SweepConfig(strategies=("beam", "best_of_n"), budgets=(4, 16), limit=20)
    problems = sweep_problems(load_dataset("arith", split="test", limit=20))
    folder = run_sweep(config, problems, "runs/my-sweep")
"""

from prmsearch.benchmarks.analysis.equal_compute import equal_compute
from prmsearch.benchmarks.analysis.report import summarize, write_reports
from prmsearch.benchmarks.datasets import (
    DatasetSpec,
    Problem,
    dataset_names,
    load_dataset,
    register_dataset,
)
from prmsearch.benchmarks.grading import grade, is_equivalent
from prmsearch.benchmarks.sweeps.config import SweepConfig
from prmsearch.benchmarks.sweeps.recipes import Recipe, load_recipe
from prmsearch.benchmarks.sweeps.results import ResultRow, ResultsFolder
from prmsearch.benchmarks.sweeps.sweep import ServerDownError, SweepProblem, run_sweep, sweep_problems

__all__ = [
    "DatasetSpec",
    "Problem",
    "Recipe",
    "ResultRow",
    "ResultsFolder",
    "ServerDownError",
    "SweepConfig",
    "SweepProblem",
    "dataset_names",
    "equal_compute",
    "grade",
    "is_equivalent",
    "load_dataset",
    "load_recipe",
    "register_dataset",
    "run_sweep",
    "summarize",
    "sweep_problems",
    "write_reports",
]
