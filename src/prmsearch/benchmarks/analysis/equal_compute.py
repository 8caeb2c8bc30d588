"""Accuracy at equal compute: every strategy read off at the same FLOPs per problem.

A sweep measures each strategy at its own budgets, and one budget costs different FLOPs in
different strategies (beam search scores every step, best-of-N one solution per sample, MCTS
a few leaves). To compare them at equal compute, each strategy's accuracy is interpolated at a
common set of FLOPs levels: linearly in log FLOPs between its measured points, never
extrapolated (outside a strategy's measured FLOPs range there is no value). The levels are the
measured FLOPs of a reference strategy (``best_of_n`` when present) at each of its budgets.

Input: the summary of :func:`prmsearch.benchmarks.analysis.report.summarize` (runs with ``strategy``,
``budget``, ``seed``, ``accuracy`` and mean ``flops`` per problem); seeds are averaged per
(strategy, budget). Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

__all__ = [
    "PREFERRED_REFERENCE",
    "CurvePoint",
    "EqualCompute",
    "Level",
    "choose_reference",
    "equal_compute",
    "interpolate",
    "markdown_section",
    "markdown_table",
    "strategy_curves",
]

#: The reference strategy whose budgets set the FLOPs levels, when the sweep has it.
PREFERRED_REFERENCE = "best_of_n"

#: Relative slack when testing whether a level lies inside a measured range (float noise only).
_REL_TOL = 1e-9


@dataclass(frozen=True)
class CurvePoint:
    """One measured budget of a strategy, seeds averaged.

    Attributes:
        budget: the strategy's ``n``.
        flops: mean FLOPs per problem (policy + PRM).
        accuracy: mean accuracy in [0, 1].
    """

    budget: int
    flops: float
    accuracy: float


@dataclass(frozen=True)
class Level:
    """One common FLOPs level: the reference strategy's cost at one of its budgets."""

    budget: int
    flops: float


@dataclass(frozen=True)
class EqualCompute:
    """Accuracy of every strategy at the reference's FLOPs levels.

    Attributes:
        reference: the strategy whose budgets define the levels.
        levels: the FLOPs levels, ascending.
        accuracy: strategy -> one accuracy per level (None where the level lies outside the
            strategy's measured FLOPs range).
    """

    reference: str
    levels: tuple[Level, ...]
    accuracy: dict[str, tuple[float | None, ...]]

    def at(self, strategy: str, level: int) -> float | None:
        """The accuracy of ``strategy`` at level index ``level``."""
        return self.accuracy[strategy][level]

    def best_other(self, level: int) -> tuple[str, float] | None:
        """The most accurate strategy other than the reference at a level (None if none has a value)."""
        values = [(-acc, name) for name, row in self.accuracy.items()
                  if name != self.reference and (acc := row[level]) is not None]
        if not values:
            return None
        neg, name = min(values)  # most accurate; ties by name
        return name, -neg

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "reference": self.reference,
            "levels": [{"budget": lv.budget, "flops": lv.flops} for lv in self.levels],
            "accuracy": {name: list(row) for name, row in self.accuracy.items()},
        }


def strategy_curves(summary: Mapping[str, Any]) -> dict[str, list[CurvePoint]]:
    """Per strategy, its measured (budget, FLOPs, accuracy) points, seeds averaged, by FLOPs.

    Runs without a finite positive FLOPs figure (no ledgers) are left out, and so is a
    strategy left with no point.
    """
    cells: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for run in summary["runs"]:
        flops = float(run["flops"])
        if math.isfinite(flops) and flops > 0:
            cells[(str(run["strategy"]), int(run["budget"]))].append(run)
    curves: dict[str, list[CurvePoint]] = defaultdict(list)
    for (strategy, budget), runs in sorted(cells.items()):
        flops = sum(float(r["flops"]) for r in runs) / len(runs)
        accuracy = sum(float(r["accuracy"]) for r in runs) / len(runs)
        curves[strategy].append(CurvePoint(budget, flops, accuracy))
    return {name: sorted(points, key=lambda p: (p.flops, p.budget)) for name, points in curves.items()}


def interpolate(points: Sequence[CurvePoint], flops: float) -> float | None:
    """Accuracy at ``flops``: linear in log FLOPs between the neighbouring measured points.

    ``points`` must be sorted by FLOPs. None outside ``[first, last]`` FLOPs (no
    extrapolation); a one-point curve has a value only at its own FLOPs. Points of equal FLOPs
    are averaged.
    """
    if not points or not flops > 0:
        return None
    lo, hi = points[0].flops, points[-1].flops
    if flops < lo * (1 - _REL_TOL) or flops > hi * (1 + _REL_TOL):
        return None
    same = [p.accuracy for p in points if math.isclose(p.flops, flops, rel_tol=_REL_TOL)]
    if same:
        return sum(same) / len(same)
    x = math.log(flops)
    for left, right in pairwise(points):
        if left.flops < flops < right.flops:
            t = (x - math.log(left.flops)) / (math.log(right.flops) - math.log(left.flops))
            return left.accuracy + t * (right.accuracy - left.accuracy)
    return None  # pragma: no cover - the range checks above leave no other case


def choose_reference(curves: Mapping[str, Sequence[CurvePoint]],
                     preferred: str = PREFERRED_REFERENCE) -> str:
    """``preferred`` when present, else the strategy with the most budgets (ties: by name)."""
    if not curves:
        raise ValueError("the summary has no run with a FLOPs figure; nothing to compare")
    if preferred in curves:
        return preferred
    return min(curves, key=lambda name: (-len(curves[name]), name))


def equal_compute(summary: Mapping[str, Any], reference: str | None = None) -> EqualCompute:
    """Every strategy's accuracy at the FLOPs of ``reference``'s budgets (default: see
    :func:`choose_reference`)."""
    curves = strategy_curves(summary)
    ref = reference if reference is not None else choose_reference(curves)
    if ref not in curves:
        known = ", ".join(sorted(curves)) or "none"
        raise ValueError(f"reference strategy {ref!r} has no run with a FLOPs figure; known: {known}")
    levels = tuple(sorted((Level(p.budget, p.flops) for p in curves[ref]), key=lambda lv: lv.flops))
    names = [ref, *sorted(name for name in curves if name != ref)]
    accuracy = {name: tuple(interpolate(curves[name], lv.flops) for lv in levels) for name in names}
    return EqualCompute(ref, levels, accuracy)


def markdown_table(result: EqualCompute) -> str:
    """Rows: strategies; columns: the FLOPs levels, each named by the reference budget."""
    header = " | ".join(f"{result.reference} n={lv.budget} ({lv.flops:.3g} FLOPs)" for lv in result.levels)
    lines = [
        f"| strategy | {header} |",
        "|---|" + "---|" * len(result.levels),
    ]
    for name, row in result.accuracy.items():
        cells = " | ".join("-" if acc is None else f"{100 * acc:.1f}%" for acc in row)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines) + "\n"


def markdown_section(summary: Mapping[str, Any]) -> str:
    """The equal-compute table under a heading, with how to read it ('' when nothing has FLOPs)."""
    curves = strategy_curves(summary)
    if not curves:
        return ""
    result = equal_compute(summary)
    text = (
        "\n## Accuracy at equal compute\n\n"
        f"Each strategy's accuracy interpolated (linear in log FLOPs, seeds averaged) at the mean "
        f"FLOPs per problem of `{result.reference}` at each of its budgets; `-`: outside the "
        "strategy's measured FLOPs range (no extrapolation).\n\n" + markdown_table(result)
    )
    outside = [
        f"{name} ({_span(curves[name])})"
        for name, row in result.accuracy.items()
        if all(acc is None for acc in row)
    ]
    if outside:
        text += f"\nMeasured FLOPs match no level: {', '.join(outside)}.\n"
    return text


def _span(points: Sequence[CurvePoint]) -> str:
    lo, hi = points[0].flops, points[-1].flops
    return f"{lo:.3g} FLOPs" if lo == hi else f"{lo:.3g}-{hi:.3g} FLOPs"
