"""A small benchmark sweep through the Python API, then reading its results.jsonl yourself.

Shows `prmsearch.benchmarks.run_sweep` with a `SweepConfig` of 2 strategies x 2 budgets on the
first 8 arithmetic test problems (the cells `prmsearch bench --strategies best_of_n,beam --budgets
1,4 --limit 8` runs). The sweep writes one row per (problem, strategy, budget, seed) to
`results.jsonl` in a temporary folder; the rows are then read back with pandas when it is
installed, else with the json module, and accuracy and mean FLOPs per (strategy, budget) printed.

Run (about fifteen seconds on a CPU, no download):

    HF_HUB_OFFLINE=1 .venv/bin/python examples/sweep_and_read.py
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

from prmsearch.benchmarks import SweepConfig, SweepProblem, load_dataset, run_sweep, sweep_problems

Cell = tuple[str, int]  # (strategy, budget)


def load_problems(config: SweepConfig) -> list[SweepProblem]:
    """The problems the config names, with their gold answers: run_sweep records the config's
    dataset fields in the manifest but searches the problems it is given."""
    dataset = load_dataset(config.dataset, config.dataset_path, split=config.split, limit=config.limit)
    return sweep_problems(dataset)


def summarize_with_pandas(results_path: Path) -> dict[Cell, tuple[float, float, int]]:
    """(accuracy, mean FLOPs, problems) per cell, with pandas."""
    import pandas as pd

    rows = pd.read_json(results_path, lines=True)
    rows["flops"] = [ledger["flops"] if isinstance(ledger, dict) else 0 for ledger in rows["ledger"]]
    table = rows.groupby(["strategy", "budget"]).agg(
        accuracy=("correct", "mean"), mean_flops=("flops", "mean"), problems=("qid", "count")
    )
    return {
        (str(strategy), int(budget)): (float(row.accuracy), float(row.mean_flops), int(row.problems))
        for (strategy, budget), row in table.iterrows()
    }


def summarize_with_json(results_path: Path) -> dict[Cell, tuple[float, float, int]]:
    """(accuracy, mean FLOPs, problems) per cell, with the standard library only."""
    by_cell: dict[Cell, list[dict]] = defaultdict(list)
    with results_path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            by_cell[(row["strategy"], int(row["budget"]))].append(row)
    summary = {}
    for cell, rows in sorted(by_cell.items()):
        flops = [row["ledger"]["flops"] if row["ledger"] else 0 for row in rows]  # no ledger: failed row
        accuracy = sum(bool(row["correct"]) for row in rows) / len(rows)
        summary[cell] = (accuracy, sum(flops) / len(rows), len(rows))
    return summary


def main() -> None:
    # Budgets are each strategy's n; beam's width defaults to gcd(n, 4) in a sweep.
    config = SweepConfig(
        dataset="arith", limit=8, strategies=("best_of_n", "beam"), budgets=(1, 4), seeds=(0,)
    )
    problems = load_problems(config)
    with tempfile.TemporaryDirectory(prefix="prmsearch-sweep-") as out:
        # Without policy= / scorer=, the backends come from the config: the embedded models.
        folder = run_sweep(config, problems, Path(out), progress=False)
        print(f"{len(problems)} problems, {len(config.cells())} cells, rows in {folder.results_path.name}")
        try:
            summary = summarize_with_pandas(folder.results_path)
            reader = "pandas"
        except ImportError:
            summary = summarize_with_json(folder.results_path)
            reader = "json"
    print(f"read with {reader}:")
    print(f"{'strategy':<12} {'n':>3} {'accuracy':>9} {'mean FLOPs':>11} {'problems':>9}")
    for (strategy, budget), (accuracy, mean_flops, count) in sorted(summary.items()):
        print(f"{strategy:<12} {budget:>3} {accuracy:>9.1%} {mean_flops:>11.3e} {count:>9}")


if __name__ == "__main__":
    main()
