"""Summaries of a sweep: ``summary.json``, a markdown table and ``accuracy.png``.

Accuracy comes with a seeded bootstrap 95% interval; costs are means per problem, taken from the
ledgers the driver charged (so every strategy is costed the same way).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.benchmarks.equal_compute import markdown_section

BOOTSTRAP_SAMPLES = 2000


def bootstrap_ci(correct: np.ndarray, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES) -> list[float]:
    """95% percentile-bootstrap interval of the mean of a 0/1 array."""
    if correct.size == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, correct.size, size=(samples, correct.size))
    means = correct[draws].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def summarize(rows: Iterable[dict[str, Any]], dataset: str, n_problems: int) -> dict[str, Any]:
    """Per (strategy, budget, seed): accuracy, its interval, mean costs and error count."""
    cells: dict[tuple[str, int, int], list[dict]] = defaultdict(list)
    for row in rows:
        cells[(row["strategy"], int(row["budget"]), int(row["seed"]))].append(row)
    runs = []
    for (strategy, budget, seed), group in sorted(cells.items()):
        correct = np.array([bool(r["correct"]) for r in group], dtype=np.float64)
        ledgers = [r["ledger"] for r in group if r.get("ledger")]

        def mean(key: str, ledgers=ledgers) -> float:
            return float(np.mean([ledger[key] for ledger in ledgers])) if ledgers else float("nan")

        runs.append(
            {
                "strategy": strategy,
                "budget": budget,
                "seed": seed,
                "n": len(group),
                "accuracy": float(correct.mean()),
                "ci95": bootstrap_ci(correct, seed=budget * 1009 + seed),
                "generated_tokens": mean("generated_tokens"),
                "prm_tokens": mean("prm_tokens_computed"),
                "flops": mean("flops"),
                "wall_s": mean("wall_s"),
                "errors": sum(1 for r in group if r.get("error")),
                "subsampled": bool(group[0].get("subsampled", False)),
            }
        )
    return {"dataset": dataset, "n_problems": n_problems, "runs": runs}


def markdown_table(summary: dict[str, Any]) -> str:
    """The summary as a markdown table, one row per (strategy, budget, seed)."""
    lines = [
        f"Dataset `{summary['dataset']}`, {summary['n_problems']} problems.",
        "",
        "| strategy | n | seed | accuracy | 95% CI | gen tokens | PRM tokens | FLOPs | wall s | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    derived = False
    for run in summary["runs"]:
        lo, hi = run["ci95"]
        mark = "*" if run.get("subsampled") else ""
        derived = derived or bool(mark)
        lines.append(
            f"| {run['strategy']}{mark} | {run['budget']} | {run['seed']} | {100 * run['accuracy']:.1f}% | "
            f"{100 * lo:.1f}-{100 * hi:.1f} | {run['generated_tokens']:.0f} | {run['prm_tokens']:.0f} | "
            f"{run['flops']:.3g} | {run['wall_s']:.3f} | {run['errors']} |"
        )
    if derived:
        lines += [
            "",
            "\\* derived from the candidates of a run at the largest budget (`--subsample-bon`); "
            "FLOPs and tokens scaled to the budget.",
        ]
    return "\n".join(lines) + "\n"


def summary_markdown(summary: dict[str, Any]) -> str:
    """What ``summary.md`` holds and ``prmsearch bench`` prints: the table, then accuracy at
    equal compute."""
    return markdown_table(summary) + markdown_section(summary)


def plot_accuracy(summary: dict[str, Any], path: Path) -> bool:
    """Accuracy vs. budget and vs. FLOPs per strategy; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    by_strategy: dict[str, list[dict]] = defaultdict(list)
    for run in summary["runs"]:
        by_strategy[run["strategy"]].append(run)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for strategy, runs in sorted(by_strategy.items()):
        per_budget: dict[int, list[dict]] = defaultdict(list)
        for run in runs:
            per_budget[run["budget"]].append(run)
        budgets = sorted(per_budget)
        acc = [100 * np.mean([r["accuracy"] for r in per_budget[b]]) for b in budgets]
        flops = [np.mean([r["flops"] for r in per_budget[b]]) for b in budgets]
        style = "o" if len(budgets) == 1 else "o-"
        left.plot(budgets, acc, style, label=strategy)
        right.plot(flops, acc, style, label=strategy)
    left.set_xscale("log", base=2)
    left.set_xlabel("budget n (generations)")
    right.set_xscale("log")
    right.set_xlabel("FLOPs per problem (policy + PRM)")
    for ax in (left, right):
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{summary['dataset']} ({summary['n_problems']} problems)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_reports(folder: Path, rows: Iterable[dict[str, Any]], dataset: str, n_problems: int) -> dict:
    """Write summary.json, summary.md (with accuracy at equal compute) and accuracy.png into
    ``folder``; return the summary."""
    summary = summarize(rows, dataset, n_problems)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (folder / "summary.md").write_text(summary_markdown(summary))
    plot_accuracy(summary, folder / "accuracy.png")
    return summary
