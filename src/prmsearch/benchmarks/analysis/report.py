"""Summaries of a sweep: ``summary.json``, a markdown table and ``accuracy.png``.

Accuracy comes with a seeded bootstrap 95% interval; costs are means per problem, taken from the
ledgers the driver charged (so every strategy is costed the same way). Given the cells a sweep
should have, the summary also counts each cell's rows against the problems: a cell with fewer
rows than problems is listed under ``missing`` (and ``prmsearch bench`` exits non-zero).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from prmsearch.benchmarks.analysis.equal_compute import markdown_section

BOOTSTRAP_SAMPLES = 2000
Grade = Callable[[str, str], bool]


def bootstrap_ci(correct: np.ndarray, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES) -> list[float]:
    """95% percentile-bootstrap interval of the mean of a 0/1 array."""
    if correct.size == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, correct.size, size=(samples, correct.size))
    means = correct[draws].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


Cell = tuple[str, int, int]


def missing_rows(counts: dict[Cell, int], expected: Sequence[Cell], n_problems: int) -> list[dict[str, Any]]:
    """Each cell of ``expected`` with fewer than ``n_problems`` rows (``counts``: rows per cell):
    its strategy, budget, seed, rows and missing rows, in ``expected`` order."""
    out = []
    for strategy, budget, seed in expected:
        have = counts.get((strategy, int(budget), int(seed)), 0)
        if have < n_problems:
            cell = {"strategy": strategy, "budget": int(budget), "seed": int(seed)}
            out.append({**cell, "rows": have, "missing": n_problems - have})
    return out


def summarize(
    rows: Iterable[dict[str, Any]],
    dataset: str,
    n_problems: int,
    cells: Sequence[Cell] | None = None,
    grade: Grade | None = None,
) -> dict[str, Any]:
    """Per (strategy, budget, seed): accuracy, its interval, mean costs, error count, and how the
    verifier did (:func:`verifier_figures`; ``grade`` judges the candidates, default the
    benchmark grader).

    With ``cells`` (every cell the sweep should have, e.g. ``SweepConfig.expected_cells()``),
    ``missing`` lists the cells with fewer rows than ``n_problems`` (see :func:`missing_rows`).
    """
    cells_rows: dict[Cell, list[dict]] = defaultdict(list)
    for row in rows:
        cells_rows[(row["strategy"], int(row["budget"]), int(row["seed"]))].append(row)
    summary = _summary(cells_rows, dataset, n_problems, grade)
    if cells is not None:
        counts = {cell: len(group) for cell, group in cells_rows.items()}
        summary["missing"] = missing_rows(counts, cells, n_problems)
    return summary


def verifier_figures(group: Sequence[dict], grade: Grade) -> dict[str, float | None]:
    """How the final candidates of a cell's rows fared, for seeing where a verifier stops helping.

    ``pass_at_n``: share of problems with at least one correct candidate (the ceiling of any
    selection). ``top1_false_positive``: among those problems, the share whose best-scored
    candidate is wrong, i.e. the PRM ranks a wrong solution above every right one (None when the
    cell's candidates carry no score, e.g. majority voting, or none has a right candidate).
    """
    solvable = scored_solvable = wrong_top = with_candidates = 0
    for row in group:
        candidates = [c for c in row.get("candidates") or () if c.get("answer") is not None]
        if not row.get("candidates"):
            continue
        with_candidates += 1
        right = [bool(grade(c["answer"], str(row["gold"]))) for c in candidates]
        if not any(right):
            continue
        solvable += 1
        keyed = [(c["score"], -i) for i, c in enumerate(candidates) if c.get("score") is not None]
        if keyed:
            scored_solvable += 1
            top = -max(keyed)[1]
            wrong_top += not right[top]
    return {
        "pass_at_n": solvable / with_candidates if with_candidates else None,
        "top1_false_positive": wrong_top / scored_solvable if scored_solvable else None,
    }


def _summary(cells: dict[Cell, list[dict]], dataset: str, n_problems: int,
             grade: Grade | None = None) -> dict[str, Any]:
    """The summary of the cells that have rows: one run each, in key order."""
    if grade is None:  # the grader caches its expensive (symbolic) verdicts itself
        from prmsearch.benchmarks.grading import is_equivalent

        grade = is_equivalent

    runs = []
    for (strategy, budget, seed), group in sorted(cells.items()):
        correct = np.array([bool(r["correct"]) for r in group], dtype=np.float64)
        ledgers = [r["ledger"] for r in group if r.get("ledger")]

        def mean(key: str, ledgers=ledgers) -> float:
            """Mean over the rows that measured ``key`` (NaN when none did: e.g. the wall time
            of rows re-selected from a sibling's run, which was not measured)."""
            values = [ledger[key] for ledger in ledgers if ledger.get(key) is not None]
            return float(np.mean(values)) if values else float("nan")

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
                "derived_from": group[0].get("derived_from"),
                **verifier_figures(group, grade),
            }
        )
    return {"dataset": dataset, "n_problems": n_problems, "runs": runs}


def _seconds(value: float | None) -> str:
    """Seconds for the table; ``-`` when not measured."""
    return "-" if value is None or value != value else f"{value:.3f}"


def markdown_table(summary: dict[str, Any]) -> str:
    """The summary as a markdown table, one row per (strategy, budget, seed)."""
    lines = [
        f"Dataset `{summary['dataset']}`, {summary['n_problems']} problems.",
        "",
        "| strategy | n | seed | accuracy | 95% CI | gen tokens | PRM tokens | FLOPs | latency s | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    derived = False
    for run in summary["runs"]:
        lo, hi = run["ci95"]
        mark = "*" if run.get("derived_from") else ""
        derived = derived or bool(mark)
        lines.append(
            f"| {run['strategy']}{mark} | {run['budget']} | {run['seed']} | {100 * run['accuracy']:.1f}% | "
            f"{100 * lo:.1f}-{100 * hi:.1f} | {run['generated_tokens']:.0f} | {run['prm_tokens']:.0f} | "
            f"{run['flops']:.3g} | {_seconds(run['wall_s'])} | {run['errors']} |"
        )
    if derived:
        lines += [
            "",
            "\\* re-selected from the candidates of a sibling's run at the same budget (same samples, "
            "`--share-bon-samples`): accuracy and costs are exactly a real run's; wall time was not "
            "measured (-).",
        ]
    lines += ["", "latency s: each problem's mean seconds from the start of its search to its answer, "
              "while the other problems of its batch ran beside it (not compute seconds per problem)."]
    if summary.get("missing"):
        lines += ["", f"**Incomplete**: {missing_text(summary['missing'], summary['n_problems'])}."]
    return "\n".join(lines) + "\n"


def missing_text(missing: Sequence[dict[str, Any]], n_problems: int, limit: int = 8) -> str:
    """One line naming the cells with missing rows and how many, e.g. ``3 rows missing: beam
    n=4 seed 0: 46 of 48 rows (2 missing); ...``."""
    total = sum(m["missing"] for m in missing)
    parts = [
        f"{m['strategy']} n={m['budget']} seed {m['seed']}: {m['rows']} of {n_problems} rows "
        f"({m['missing']} missing)"
        for m in missing[:limit]
    ]
    more = f"; and {len(missing) - limit} more cells" if len(missing) > limit else ""
    return f"{total} rows missing: " + "; ".join(parts) + more


def verifier_table(summary: dict[str, Any]) -> str:
    """Per strategy, across budgets: accuracy, pass@N of the final candidates and the PRM's top-1
    false-positive rate (seeds averaged); empty when no run has scored candidates."""
    cells: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for run in summary["runs"]:
        if run.get("top1_false_positive") is not None:
            cells[run["strategy"]][int(run["budget"])].append(run)
    if not cells:
        return ""
    budgets = sorted({b for by in cells.values() for b in by})

    def cell(runs: list[dict]) -> str:
        if not runs:
            return "-"
        acc = np.mean([r["accuracy"] for r in runs])
        passed = np.mean([r["pass_at_n"] for r in runs])
        fp = np.mean([r["top1_false_positive"] for r in runs])
        return f"{100 * acc:.0f} / {100 * passed:.0f} / {100 * fp:.0f}"

    lines = [
        "",
        "## Where the verifier stops helping",
        "",
        "Accuracy / pass@N of the final candidates / the PRM's top-1 false-positive rate (among problems "
        "with a right candidate, the share whose best-scored candidate is wrong), in %, per budget.",
        "",
        "| strategy | " + " | ".join(f"n={b}" for b in budgets) + " |",
        "|---|" + "---|" * len(budgets),
    ]
    for strategy, by_budget in sorted(cells.items()):
        lines.append(f"| {strategy} | " + " | ".join(cell(by_budget.get(b, [])) for b in budgets) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(summary: dict[str, Any]) -> str:
    """What ``summary.md`` holds and ``prmsearch bench`` prints: the table, accuracy at equal
    compute, and where the verifier stops helping."""
    return markdown_table(summary) + markdown_section(summary) + verifier_table(summary)


_SCORER_MARKERS = ("s", "^", "D", "v", "P", "X")


def series_looks(names: list[str]) -> dict[str, tuple[Any, str, str]]:
    """A (colour, marker, line style) per series, none shared: one colour per strategy (the
    name before ``" ["``), and per scorer (the bracketed rest, as the real-model table labels
    series) its own marker and a dashed line, so "beam" and "beam [1.5B as verifier]" read as
    one family and no two strategies share a colour, however many there are."""
    import matplotlib.pyplot as plt

    bases = sorted({name.split(" [")[0] for name in names})
    # tab10 and tab20 are ListedColormaps, whose colors are a tuple of RGB tuples (matplotlib
    # annotates get_cmap as returning the base Colormap, which has no colors)
    palette: Sequence[Any] = cast(Any, plt.get_cmap("tab10" if len(bases) <= 10 else "tab20")).colors
    scorers = sorted({name.partition(" [")[2] for name in names} - {""})
    looks = {}
    for name in names:
        base, _, scorer = name.partition(" [")
        color = palette[bases.index(base) % len(palette)]
        if not scorer:
            looks[name] = (color, "o", "-")
        else:
            looks[name] = (color, _SCORER_MARKERS[scorers.index(scorer) % len(_SCORER_MARKERS)], "--")
    return looks


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
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2))
    look = series_looks(sorted(by_strategy))
    for strategy, runs in sorted(by_strategy.items()):
        per_budget: dict[int, list[dict]] = defaultdict(list)
        for run in runs:
            per_budget[run["budget"]].append(run)
        budgets = sorted(per_budget)
        acc = [100 * np.mean([r["accuracy"] for r in per_budget[b]]) for b in budgets]
        flops = [np.mean([r["flops"] for r in per_budget[b]]) for b in budgets]
        color, marker, line = look[strategy]
        style = {"color": color, "marker": marker, "linestyle": line if len(budgets) > 1 else "none"}
        left.plot(budgets, acc, label=strategy, **style)
        right.plot(flops, acc, label=strategy, **style)
    left.set_xscale("log", base=2)
    left.set_xlabel("budget n (generations)")
    if any(run["flops"] > 0 for run in summary["runs"]):
        right.set_xscale("log")  # a backend of unknown size counts no FLOPs: then a linear axis of zeros
        right.set_xlabel("FLOPs per problem (policy + PRM)")
    else:
        right.set_xlabel("FLOPs per problem (unknown: the backends did not say their model sizes)")
    for ax in (left, right):
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
    right.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))  # beside: never over a point
    fig.suptitle(f"{summary['dataset']} ({summary['n_problems']} problems)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_reports(
    folder: Path,
    rows: Iterable[dict[str, Any]],
    dataset: str,
    n_problems: int,
    cells: Sequence[Cell] | None = None,
) -> dict:
    """Write summary.json, summary.md (with accuracy at equal compute) and accuracy.png into
    ``folder``; return the summary (with ``missing`` when ``cells`` is given)."""
    summary = summarize(rows, dataset, n_problems, cells)
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (folder / "summary.md").write_text(summary_markdown(summary))
    plot_accuracy(summary, folder / "accuracy.png")
    return summary
