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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from prmsearch.benchmarks.equal_compute import CurvePoint, interpolate
from prmsearch.benchmarks.planning import FitConfig, Run, fit_plan, read_run, row_difficulty
from prmsearch.benchmarks.sweep_config import FAMILY
from prmsearch.search.plan import Plan

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


def replay_plan(plan: Plan, runs: Sequence[Run], qids: Sequence[str], probe: tuple[str, int], level: int,
                seed: int) -> tuple[float, float]:
    """Held-out accuracy and mean FLOPs of ``plan`` at ``level`` on ``qids``, replayed from the
    recorded rows (the fit's cost rule: the probe's FLOPs plus the arm's, or only the arm's for a
    best-of-N-family arm that extends a probe of samples)."""
    rows = {(r.strategy, r.budget, r.qid): r for _, rs in runs for r in rs if r.seed == seed and not r.error}
    extends = probe[0] in FAMILY
    correct, flops = [], []
    for qid in qids:
        probe_row = rows[(*probe, qid)]
        probe_flops = float(probe_row.ledger["flops"])
        arm = plan.level(level).arms[plan.bin_of(row_difficulty(probe_row))]
        if not arm.searches:
            correct.append(bool(probe_row.correct))
            flops.append(probe_flops)
            continue
        row = rows.get((arm.strategy, arm.budget, qid))
        if row is None:
            raise ValueError(f"no {arm.strategy} n={arm.budget} row for {qid}; every arm's run must cover "
                             "every problem")
        own = float(row.ledger["flops"])
        correct.append(bool(row.correct))
        flops.append(max(own, probe_flops) if extends and arm.strategy in FAMILY else probe_flops + own)
    return float(np.mean(correct)), float(np.mean(flops))


def _best_fixed(runs: Sequence[Run], qids: set[str], flops: float, seed: int,
                strategies: Sequence[str] | None) -> float | None:
    """The most accurate fixed strategy at ``flops`` on ``qids`` (its curve over its budgets)."""
    cells: dict[str, dict[int, list[tuple[bool, float]]]] = {}
    for _, rows in runs:
        for r in rows:
            if r.seed != seed or r.error or r.qid not in qids or r.strategy in ("planner", "mcts"):
                continue
            if strategies is not None and r.strategy not in strategies:
                continue
            cells.setdefault(r.strategy, {}).setdefault(r.budget, []).append(
                (bool(r.correct), float(r.ledger["flops"])))
    best = None
    for budgets in cells.values():
        points = sorted((CurvePoint(b, float(np.mean([f for _, f in v])), float(np.mean([c for c, _ in v])))
                         for b, v in budgets.items()), key=lambda p: p.flops)
        value = interpolate(points, flops)
        if value is not None and (best is None or value > best):
            best = value
    return best


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
    results = []
    for probe in (p for p in probes if p in present):
        for count in bins:
            config = replace(base, probe_strategy=probe[0], probe=probe[1], bins=count, seed=seed)
            per_level: dict[int, list[tuple[float, float, float]]] = {n: [] for n in config.levels}
            for k, judged in enumerate(parts):
                fit_ids = {q for j, part in enumerate(parts) if j != k for q in part}
                fit_runs = [(sweep, [r for r in rows if r.qid in fit_ids]) for sweep, rows in runs]
                plan, _, _ = fit_plan(fit_runs, config)
                for n in config.levels:
                    accuracy, flops = replay_plan(plan, runs, judged, probe, n, seed)
                    fixed = _best_fixed(runs, set(judged), flops, seed, config.strategies)
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
            r = row.get(n)
            if r is None:
                cells.append("-")
                continue
            margin = "-" if math.isnan(r.margin) else f"{100 * r.margin:+.1f}"
            cells.append(f"{100 * r.accuracy:.1f}% @ {r.flops:.3g} ({margin})")
            if not math.isnan(r.margin):
                margins.append(r.margin)
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
