"""Choosing a plan's probe and bin count without touching the test split: k-fold cross-validation
inside the validation sweep.

``prmsearch plan fit`` needs a probe (strategy and budget) and a number of difficulty bins. Picking
them by how the fitted plan does on test would fit the test split; picking them by the fit's own
in-sample figures favours many small bins. Here each candidate setting is fitted on all folds but
one and judged on the fold left out, by replaying the held-out problems' recorded runs: the probe
row gives the problem's difficulty and bin, the plan's arm for that bin names the run whose
``correct`` and ``ledger.flops`` (plus the probe's, as the fit charges them) count. The margin of a
setting at a level is its held-out accuracy minus the best fixed (strategy, budget) curve's accuracy
at the same mean FLOPs on the same held-out problems (interpolated in log FLOPs, never
extrapolated), averaged over the folds. Pure but :func:`cross_validate_folders`, which reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from prmsearch.benchmarks.analysis.equal_compute import CurvePoint, interpolate
from prmsearch.planner.fit import (
    FitConfig,
    RecordedCells,
    Run,
    arm_flops,
    fit_plan,
    probe_features,
    read_cells,
    read_run,
)
from prmsearch.planner.plan import Plan

__all__ = ["CvResult", "cross_validate", "cross_validate_folders", "cv_markdown", "replay_plan"]


@dataclass(frozen=True)
class CvResult:
    """One setting's held-out figures at one level, averaged over the folds.

    Attributes:
        probe: the probe as ``strategy@budget``; bins: the bin count asked for.
        level: the plan level ``n``.
        accuracy, flops: held-out accuracy and mean FLOPs per problem.
        margin: held-out accuracy minus the best fixed strategy's at the same FLOPs (NaN when no
            fixed strategy was measured at those FLOPs in any fold).
    """

    probe: str
    bins: int
    level: int
    accuracy: float
    flops: float
    margin: float


def _probe_features(runs: Sequence[Run], probe: tuple[str, int], seed: int) -> dict[str, float]:
    """Each problem's difficulty feature from the probe run's rows, as the planner reads it."""
    return probe_features(r for _, rows in runs for r in rows
                          if (r.strategy, r.budget) == probe and r.seed == seed and not r.error)


def _replay(plan: Plan, cells: RecordedCells, features: Mapping[str, float], qids: Sequence[str],
            probe: tuple[str, int], level: int) -> tuple[float, float]:
    """:func:`replay_plan` on outcomes and probe features read once."""
    probe_cell = cells.outcomes[probe]
    correct, flops = [], []
    for qid in qids:
        probe_correct, probe_flops = probe_cell[qid]
        arm = plan.level(level).arms[plan.bin_of(features[qid])]
        if not arm.searches:
            correct.append(probe_correct)
            flops.append(probe_flops)
            continue
        outcome = cells.outcomes.get((arm.strategy, arm.budget), {}).get(qid)
        if outcome is None:
            raise ValueError(f"no {arm.strategy} n={arm.budget} row for {qid}; every arm's run must cover "
                             "every problem")
        correct.append(outcome[0])
        flops.append(arm_flops(probe[0], arm.strategy, probe_flops, outcome[1]))
    return float(np.mean(correct)), float(np.mean(flops))


def replay_plan(plan: Plan, runs: Sequence[Run], qids: Sequence[str], probe: tuple[str, int], level: int,
                seed: int) -> tuple[float, float]:
    """Held-out accuracy and mean FLOPs of ``plan`` at ``level`` on ``qids``, replayed from the
    recorded rows (the fit's cost rule, :func:`~prmsearch.planner.fit.arm_flops`)."""
    return _replay(plan, read_cells(runs, seed), _probe_features(runs, probe, seed), qids, probe, level)


def _fixed_curves(cells: RecordedCells, qids: set[str],
                  strategies: Sequence[str] | None) -> list[list[CurvePoint]]:
    """Every fixed strategy's (FLOPs, accuracy) curve over its budgets on ``qids`` (not the
    planner's or MCTS's; only ``strategies`` when given)."""
    curves: dict[str, list[CurvePoint]] = {}
    for (strategy, budget), outcomes in cells.outcomes.items():
        if strategy == "mcts" or (strategies is not None and strategy not in strategies):
            continue
        values = [outcomes[q] for q in qids if q in outcomes]
        if values:
            curves.setdefault(strategy, []).append(CurvePoint(
                budget, float(np.mean([f for _, f in values])), float(np.mean([c for c, _ in values]))))
    return [sorted(points, key=lambda p: p.flops) for points in curves.values()]


def _best_at(curves: Sequence[Sequence[CurvePoint]], flops: float) -> float | None:
    """The highest accuracy any curve reaches at ``flops`` (None when no curve spans it)."""
    values = [v for v in (interpolate(points, flops) for points in curves) if v is not None]
    return max(values, default=None)


def cross_validate(runs: Sequence[Run], base: FitConfig, probes: Sequence[tuple[str, int]],
                   bins: Sequence[int], folds: int = 2) -> list[CvResult]:
    """Every (probe, bins) setting's held-out figures per level of ``base.levels`` (see the module
    docstring). Problems are dealt to folds in question-id order (``qids[k::folds]``). A probe
    without a run in the folders is left out (:func:`cv_markdown` names it); none at all is an
    error."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an int >= 2, got {folds!r}")
    seeds = sorted({r.seed for _, rows in runs for r in rows})
    if not seeds:
        raise ValueError("the results folders hold no rows")
    seed = base.seed if base.seed is not None else seeds[0]
    qids = sorted({r.qid for _, rows in runs for r in rows if r.seed == seed})
    if len(qids) < 2 * folds:
        raise ValueError(f"{len(qids)} problems are too few for {folds} folds (at least {2 * folds})")
    parts = [qids[k::folds] for k in range(folds)]
    present = {(r.strategy, r.budget) for _, rows in runs for r in rows if r.seed == seed}
    missing = [f"{s}@{b}" for s, b in probes if (s, b) not in present]
    if len(missing) == len(probes):
        raise ValueError(f"no probe has a run in the folders ({', '.join(missing)}); add one, e.g. "
                         "prmsearch bench --split validation --strategies beam,... --budgets 4,...")
    cells = read_cells(runs, seed)
    fits = []  # per fold: the other folds' rows to fit on, the fold's problems and fixed curves
    for k, judged in enumerate(parts):
        fit_ids = {q for j, part in enumerate(parts) if j != k for q in part}
        fits.append(([(sweep, [r for r in rows if r.qid in fit_ids]) for sweep, rows in runs], judged,
                     _fixed_curves(cells, set(judged), base.strategies)))
    results = []
    for probe in (p for p in probes if p in present):
        features = _probe_features(runs, probe, seed)
        for count in bins:
            config = replace(base, probe_strategy=probe[0], probe=probe[1], bins=count, seed=seed)
            per_level: dict[int, list[tuple[float, float, float]]] = {n: [] for n in config.levels}
            for fit_runs, judged, curves in fits:
                plan, _, _ = fit_plan(fit_runs, config)
                for n in config.levels:
                    accuracy, flops = _replay(plan, cells, features, judged, probe, n)
                    fixed = _best_at(curves, flops)
                    per_level[n].append((accuracy, flops, math.nan if fixed is None else accuracy - fixed))
            for n, values in per_level.items():
                margins = [m for _, _, m in values if not math.isnan(m)]
                results.append(CvResult(f"{probe[0]}@{probe[1]}", count, n,
                                        float(np.mean([a for a, _, _ in values])),
                                        float(np.mean([f for _, f, _ in values])),
                                        float(np.mean(margins)) if margins else math.nan))
    return results


def cross_validate_folders(paths: Sequence[str | Path], base: FitConfig, probes: Sequence[tuple[str, int]],
                           bins: Sequence[int], folds: int = 2) -> list[CvResult]:
    """Read validation bench folders (as ``plan fit`` does) and :func:`cross_validate` on them."""
    runs = [read_run(path, base.any_split) for path in paths]
    return cross_validate(runs, base, probes, bins, folds)


def best_setting(results: Sequence[CvResult]) -> tuple[str, int] | None:
    """The (probe, bins) with the highest mean margin over the levels where it has one."""
    scores: dict[tuple[str, int], list[float]] = {}
    for r in results:
        if not math.isnan(r.margin):
            scores.setdefault((r.probe, r.bins), []).append(r.margin)
    if not scores:
        return None
    return max(scores, key=lambda key: (float(np.mean(scores[key])), -key[1]))


def cv_markdown(results: Sequence[CvResult], folds: int, probes: Sequence[tuple[str, int]] = ()) -> str:
    """One row per setting: held-out accuracy, FLOPs and margin per level, and the best setting;
    the asked ``probes`` that have no result are named as left out (no run in the folders)."""
    levels = sorted({r.level for r in results})
    table: dict[tuple[str, int], dict[int, CvResult]] = {}
    for r in results:
        table.setdefault((r.probe, r.bins), {})[r.level] = r
    lines = [
        f"Held-out figures ({folds}-fold cross-validation inside the folders' problems): accuracy, mean "
        "FLOPs, and the margin over the best fixed strategy at the same FLOPs (points; `-`: no fixed "
        "strategy measured at those FLOPs).",
        "",
        "| probe | bins | " + " | ".join(f"level {n}" for n in levels) + " | mean margin |",
        "|---|---|" + "---|" * (len(levels) + 1),
    ]
    for (probe, count), row in table.items():
        cells, margins = [], []
        for n in levels:
            result = row.get(n)
            if result is None:
                cells.append("-")
                continue
            margin = "-" if math.isnan(result.margin) else f"{100 * result.margin:+.1f}"
            cells.append(f"{100 * result.accuracy:.1f}% @ {result.flops:.3g} ({margin})")
            if not math.isnan(result.margin):
                margins.append(result.margin)
        mean = f"{100 * float(np.mean(margins)):+.1f}" if margins else "-"
        lines.append(f"| {probe} | {count} | " + " | ".join(cells) + f" | {mean} |")
    judged = {r.probe for r in results}
    absent = [f"{s}@{b}" for s, b in probes if f"{s}@{b}" not in judged]
    if absent:
        lines += ["", f"Left out (no run of the probe in the folders): {', '.join(absent)}."]
    best = best_setting(results)
    if best is not None:
        strategy, budget = best[0].split("@")
        lines += ["", f"Best setting: probe {best[0]}, {best[1]} bins. Fit it on the whole validation "
                      f"sweep: `prmsearch plan fit FOLDER --probe-strategy {strategy} --probe {budget} "
                      f"--bins {best[1]} --levels {','.join(map(str, levels))} --out plan.json`"]
    return "\n".join(lines) + "\n"
