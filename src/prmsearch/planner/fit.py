"""Fitting a compute-optimal plan for the ``planner`` strategy on a validation sweep.

Snell, Lee, Xu and Kumar, 2024, "Scaling LLM Test-Time Compute Optimally can be More Effective
than Scaling Model Parameters" (arXiv:2408.03314), choose per difficulty bin the strategy that
does best at a given budget. Here the same is done per problem with compute measured in FLOPs,
from a bench results folder of the VALIDATION split that holds, for the same problems:

* a **probe run**: ``beam`` (by default) at the probe budget, a cheap search whose own answer
  stands on easy problems, or any other strategy (``weighted_vote``: whole solutions). Its rows'
  candidates (``answer``, ``group``, ``score``) give each problem's difficulty feature,
  :func:`~prmsearch.planner.plan.leader_mass`, exactly as the planner computes it from its own
  probe (the same request seeds and strategy seed draw the same samples); its ``correct`` is the
  budget-0 arm's (the probe's own answer) and its ``ledger.flops`` the probe's cost;
* runs of the candidate strategies at several budgets: their per-problem ``correct`` and
  ``ledger.flops``.

The features are cut into ``bins`` equal-count bins (:func:`quantile_edges`). An arm's accuracy
on a problem is its run's ``correct``; its cost is the probe's FLOPs plus the arm's own, except
for a best-of-N-family arm after a best-of-N-family probe, which the planner runs as an
extension of the probe (the probe's samples are its first ones, as in the sweep, where a run at
budget 8 starts with the samples of the run at 4): its cost is its own run's FLOPs (at least the
probe's). For each plan
level ``n`` the target is the reference strategy's (``best_of_n``) mean FLOPs per problem at budget
``n``, and :func:`choose_arms` picks one arm per bin to maximise the mean accuracy with mean FLOPs
at most the target: an exact multiple-choice knapsack over the bins (a Pareto frontier of
(FLOPs, accuracy), pruned bin by bin). Everything here is pure but :func:`fit_folder`, which
reads the folder (plan files are read and written by :mod:`prmsearch.planner.plan`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.benchmarks.sweeps.config import SweepConfig
from prmsearch.benchmarks.sweeps.results import MANIFEST, ResultRow, ResultsFolder
from prmsearch.planner.plan import (
    NOT_DELEGABLE,
    PROBE_ARM,
    Plan,
    PlanArm,
    PlanLevel,
    bin_index,
    draws_samples,
    leader_mass,
)
from prmsearch.search.aggregation import Aggregation
from prmsearch.search.protocol import strategy_spec
from prmsearch.search.selection import Ballot
from prmsearch.tree import NO_GROUP

__all__ = [
    "ArmFigures",
    "FitConfig",
    "FittedLevel",
    "RecordedCells",
    "arm_breakdown",
    "arm_flops",
    "choose_arms",
    "compute_spread",
    "fit_folder",
    "fit_markdown",
    "fit_plan",
    "probe_features",
    "quantile_edges",
    "read_cells",
    "read_run",
]

#: Relative slack on the FLOPs target (float noise only).
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class FitConfig:
    """How ``prmsearch plan fit`` fits a plan.

    Attributes:
        levels: the plan levels (planner budgets ``n``) to fit; each targets the reference's mean
            FLOPs per problem at that budget.
        reference: the strategy whose FLOPs at each level's budget are the target.
        probe_strategy: the strategy whose run at budget ``probe`` is the probe: any strategy the
            planner can delegate to (the plan's probe is then that arm, with the run's options;
            ``beam`` by default, the probe ``prmsearch plan cv`` chose on the embedded models), or
            ``weighted_vote`` (``probe`` whole solutions; the plan's ``probe`` is that number).
            Its own answer stands on budget-0 problems.
        probe: the probe run's budget.
        bins: difficulty bins (equal-count quantiles of the feature).
        strategies: the strategies the arms may use (None: every strategy in the folder but the
            planner).
        seed: the run seed whose rows are read (None: the smallest in the folder).
        any_split: allow a folder of a split other than ``validation`` (a dataset without one);
            fitting on the split you judge on overstates the plan.
    """

    levels: tuple[int, ...] = (4, 8, 16)
    reference: str = "best_of_n"
    probe_strategy: str = "beam"
    probe: int = 4
    bins: int = 3
    strategies: tuple[str, ...] | None = None
    seed: int | None = None
    any_split: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "levels", tuple(self.levels))
        bad = [n for n in self.levels if isinstance(n, bool) or not isinstance(n, int) or n < 1]
        if not self.levels or bad:
            raise ValueError(f"levels must be ints >= 1, got {self.levels}")
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels must not repeat, got {self.levels}")
        for name in ("probe", "bins"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        strategy_spec(self.probe_strategy)  # an unknown name lists the known ones
        if self.probe_strategy in NOT_DELEGABLE:
            raise ValueError(f"probe_strategy {self.probe_strategy!r} cannot probe: "
                             f"{NOT_DELEGABLE[self.probe_strategy]}")
        if self.strategies is not None:
            object.__setattr__(self, "strategies", tuple(self.strategies))
            for name in self.strategies:
                strategy_spec(name)  # an unknown name lists the known ones


@dataclass(frozen=True)
class ArmFigures:
    """An arm's mean accuracy and mean FLOPs (probe included) over the problems of one bin."""

    arm: PlanArm
    accuracy: float
    flops: float


@dataclass(frozen=True)
class FittedLevel:
    """One fitted level: its target, the chosen arm figures per bin, and the expected means."""

    n: int
    target_flops: float
    chosen: tuple[ArmFigures, ...]
    accuracy: float
    flops: float
    feasible: bool
    reference_accuracy: float
    best_fixed: tuple[str, int, float, float] | None = None  # strategy, budget, accuracy, flops


@dataclass
class RecordedCells:
    """Per (strategy, budget): per problem (correct, flops), and the options its run used."""

    outcomes: dict[tuple[str, int], dict[str, tuple[bool, float]]] = field(default_factory=dict)
    options: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)


def _group(candidate: Mapping[str, Any]) -> Any:
    if candidate.get("answer") is None or candidate.get("group") == NO_GROUP:
        return None
    return candidate.get("group", candidate["answer"])


def _score(value: object) -> float:
    if value is None or not isinstance(value, (int, float)) or math.isnan(value):
        return -math.inf
    return float(value)


def row_difficulty(row: ResultRow) -> float:
    """:func:`~prmsearch.planner.plan.leader_mass` of a probe row's candidates (as stored: the
    aggregated path score of every sample under the probe run's aggregation)."""
    if not row.candidates:
        raise ValueError(f"probe row {row.qid} ({row.strategy} n={row.budget}) has no candidates")
    candidates = [Ballot(_group(c), _score(c.get("score")), i) for i, c in enumerate(row.candidates)]
    return leader_mass(candidates, len(candidates))


def probe_features(rows: Iterable[ResultRow]) -> dict[str, float]:
    """The difficulty feature of every probe row, by question id."""
    return {row.qid: row_difficulty(row) for row in rows}


def quantile_edges(values: Sequence[float], bins: int) -> tuple[float, ...]:
    """Edges that cut ``values`` into ``bins`` bins of (nearly) equal count: each edge lies halfway
    between the neighbouring sorted values at a cut, so no value sits on an edge unless values
    tie there (ties go to the upper bin, as :meth:`Plan.bin_of`); repeated edges are dropped."""
    ordered = sorted(values)
    edges: list[float] = []
    for i in range(1, bins):
        cut = round(i * len(ordered) / bins)
        if 0 < cut < len(ordered):
            edge = round((ordered[cut - 1] + ordered[cut]) / 2, 6)
            if not edges or edge > edges[-1]:
                edges.append(edge)
    return tuple(edges)


def choose_arms(options: Sequence[Sequence[tuple[float, float]]], weights: Sequence[float],
                target: float) -> tuple[list[int], bool]:
    """One arm per bin maximising ``sum(w * accuracy)`` with ``sum(w * flops) <= target``.

    ``options[k]`` lists bin ``k``'s arms as (accuracy, flops); ``weights[k]`` is the bin's share
    of the problems. Exact: the (flops, accuracy) Pareto frontier of partial choices is kept bin
    by bin. Ties go to the cheaper choice, then the earlier arms. Returns the chosen arm index
    per bin and whether the target could be met (if not: the cheapest choice).
    """
    frontier: list[tuple[float, float, tuple[int, ...]]] = [(0.0, 0.0, ())]
    limit = target * (1 + _TOLERANCE)
    for arms, weight in zip(options, weights, strict=True):
        grown = [(cost + weight * flops, acc + weight * accuracy, (*picks, j))
                 for cost, acc, picks in frontier for j, (accuracy, flops) in enumerate(arms)]
        grown.sort(key=lambda s: (s[0], -s[1], s[2]))
        frontier = []
        for state in grown:
            if not frontier or state[1] > frontier[-1][1] + 1e-12:
                frontier.append(state)
    feasible = [s for s in frontier if s[0] <= limit]
    if not feasible:
        return list(frontier[0][2]), False
    best = max(feasible, key=lambda s: (s[1], -s[0]))
    return list(best[2]), True


def arm_flops(probe_strategy: str, arm_strategy: str, probe_flops: float, own_flops: float) -> float:
    """What a problem costs when the planner runs an arm after the probe: the probe's FLOPs plus the
    arm's, except that a best-of-N-family arm after a probe of samples extends it (the probe's
    samples are its first ones, as a sweep's run at 8 starts with the samples of its run at 4), so
    it costs its own run's FLOPs, at least the probe's."""
    if draws_samples(probe_strategy) and draws_samples(arm_strategy):
        return max(own_flops, probe_flops)
    return probe_flops + own_flops


def _sweep_config(config: Mapping[str, Any]) -> SweepConfig:
    known = set(SweepConfig.__dataclass_fields__)
    return SweepConfig(**{k: v for k, v in config.items() if k in known})


Run = tuple[SweepConfig, Sequence[ResultRow]]


def read_cells(runs: Sequence[Run], seed: int) -> RecordedCells:
    """Every (strategy, budget) of the runs but the planner's, at run seed ``seed``, errors left
    out; a cell found in several runs: the last run's rows win."""
    cells = RecordedCells()
    for sweep, rows in runs:
        for row in rows:
            if row.seed != seed or row.strategy == "planner" or row.error or row.ledger is None:
                continue
            key = (row.strategy, row.budget)
            cells.outcomes.setdefault(key, {})[row.qid] = (bool(row.correct), float(row.ledger["flops"]))
            if row.strategy in sweep.strategies:
                options = sweep.strategy_options(row.strategy, row.budget)
                cells.options[key] = {k: v for k, v in options.items() if k != "n"}
            else:
                cells.options.setdefault(key, {})
    return cells


def fit_plan(runs: Sequence[Run], config: FitConfig) -> tuple[Plan, list[FittedLevel], dict[str, Any]]:
    """Fit a plan on the rows of one or more sweeps of the same problems, given as (the sweep's
    config, its rows) pairs (see the module docstring).

    Returns the plan, its fitted levels, and facts about the fit (problems, bins, edges).
    """
    seeds = sorted({row.seed for _, rows in runs for row in rows})
    if not seeds:
        raise ValueError("the results folder holds no rows")
    seed = config.seed if config.seed is not None else seeds[0]
    if seed not in seeds:
        raise ValueError(f"seed {seed} has no rows; the folder's seeds: {seeds}")
    probe_key = (config.probe_strategy, config.probe)
    cells = read_cells(runs, seed)
    if probe_key not in cells.outcomes:
        raise ValueError(
            f"no probe rows: the folder needs a {config.probe_strategy} run at budget {config.probe} "
            f"(prmsearch bench --strategies {config.probe_strategy},... --budgets {config.probe},...)"
        )
    probe_rows = [r for _, rows in runs for r in rows
                  if (r.strategy, r.budget) == probe_key and r.seed == seed and not r.error]
    aggregation = Aggregation.parse(strategy_spec(config.probe_strategy).configure(
        n=config.probe, **cells.options[probe_key]).config.aggregation)
    features = probe_features(probe_rows)
    probe_cell = cells.outcomes[probe_key]
    arm_keys = [key for key in sorted(cells.outcomes) if key[0] not in ("planner", "mcts")
                and (config.strategies is None or key[0] in config.strategies)]
    references = [(config.reference, n) for n in config.levels if (config.reference, n) in cells.outcomes]
    # every arm must cover the problems: keep the problems the probe and every cell used share
    qids = set(features)
    for key in {probe_key, *arm_keys, *references}:
        qids &= set(cells.outcomes[key])
    if not qids:
        raise ValueError("no problem has a row in the probe run and in every strategy's run; "
                         "run every strategy on the same problems (same --limit)")
    qids_sorted = sorted(qids)
    values = [features[q] for q in qids_sorted]
    edges = quantile_edges(values, config.bins)
    members: dict[int, list[str]] = defaultdict(list)
    for q in qids_sorted:
        members[bin_index(edges, features[q])].append(q)
    bins = len(edges) + 1
    weights = [len(members[k]) / len(qids_sorted) for k in range(bins)]
    arms = [PlanArm(PROBE_ARM, 0)]
    keys: list[tuple[str, int] | None] = [None]
    for key in arm_keys:
        arms.append(PlanArm(key[0], key[1], tuple(sorted(cells.options[key].items()))))
        keys.append(key)

    def figures(k: int, index: int) -> ArmFigures:
        group = members[k]
        if not group:
            return ArmFigures(arms[index], 0.0, 0.0)
        key = keys[index]
        correct, flops = [], []
        for q in group:
            probe_correct, probe_flops = probe_cell[q]
            if key is None:
                correct.append(probe_correct)
                flops.append(probe_flops)
            else:
                ok, cost = cells.outcomes[key][q]
                correct.append(ok)
                flops.append(arm_flops(config.probe_strategy, key[0], probe_flops, cost))
        return ArmFigures(arms[index], float(np.mean(correct)), float(np.mean(flops)))

    table = [[figures(k, i) for i in range(len(arms))] for k in range(bins)]
    fitted = []
    for n in config.levels:
        fitted.append(_fit_level(n, table, weights, cells, qids_sorted, config))
    probe: int | PlanArm = config.probe
    if config.probe_strategy != "weighted_vote":
        probe = PlanArm(config.probe_strategy, config.probe, tuple(sorted(cells.options[probe_key].items())))
    plan = Plan(probe, edges, tuple(PlanLevel(f.n, tuple(a.arm for a in f.chosen)) for f in fitted),
                aggregation)
    facts = {
        "problems": len(qids_sorted),
        "seed": seed,
        "edges": list(edges),
        "bin_sizes": [len(members[k]) for k in range(bins)],
        "aggregation": aggregation.value,
        "probe": plan.probe_text if plan.probe_arm else f"{config.probe_strategy} n={config.probe}",
        "feature": "leader_mass",
        # every arm's in-sample figures per bin, hardest bin first: the alternatives to the choice
        "arms_per_bin": [[{"arm": a.arm.describe(), "accuracy": a.accuracy, "flops": a.flops} for a in row]
                         for row in table],
    }
    return plan, fitted, facts


def _fit_level(n: int, table: list[list[ArmFigures]], weights: list[float], cells: RecordedCells,
               qids: list[str], config: FitConfig) -> FittedLevel:
    ref = cells.outcomes.get((config.reference, n))
    if ref is None:
        budgets = sorted(b for s, b in cells.outcomes if s == config.reference)
        raise ValueError(f"level {n}: the reference {config.reference!r} has no run at budget {n} "
                         f"(its budgets: {budgets or 'none'}); add it to the validation sweep")
    target = float(np.mean([ref[q][1] for q in qids]))
    picks, feasible = choose_arms([[(a.accuracy, a.flops) for a in row] for row in table], weights, target)
    chosen = tuple(table[k][j] for k, j in enumerate(picks))
    accuracy = sum(w * a.accuracy for w, a in zip(weights, chosen))
    flops = sum(w * a.flops for w, a in zip(weights, chosen))
    fixed = [(s, b, float(np.mean([o[q][0] for q in qids])), float(np.mean([o[q][1] for q in qids])))
             for (s, b), o in cells.outcomes.items()]
    within = [f for f in fixed if f[3] <= target * (1 + _TOLERANCE)]
    best = max(within, key=lambda f: (f[2], -f[3])) if within else None
    return FittedLevel(n, target, chosen, accuracy, flops, feasible,
                       float(np.mean([ref[q][0] for q in qids])), best)


def read_run(path: str | Path, any_split: bool = False) -> Run:
    """A bench results folder as (its sweep config, its rows); a folder of another split than
    ``validation`` is refused unless ``any_split``."""
    folder = Path(path)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{folder} is not a bench results folder (no {MANIFEST})")
    manifest = json.loads(manifest_path.read_text())
    sweep = _sweep_config(manifest.get("config", {}))
    if sweep.split != "validation" and not any_split:
        raise ValueError(
            f"{folder} holds the {sweep.split or 'default (test)'} split; fit on a validation sweep "
            "(prmsearch bench --split validation ...) and judge on test, or pass --any-split for a "
            "dataset without a validation split"
        )
    return sweep, list(ResultsFolder(folder).result_rows())


def fit_folder(paths: str | Path | Sequence[str | Path],
               config: FitConfig) -> tuple[Plan, list[FittedLevel], dict[str, Any]]:
    """Read one or more bench results folders of the same problems and :func:`fit_plan` on them."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    runs = [read_run(path, config.any_split) for path in paths]
    datasets = {(sweep.dataset, sweep.split) for sweep, _ in runs}
    if len(datasets) > 1:
        raise ValueError(f"the folders hold different datasets or splits: {sorted(map(str, datasets))}")
    plan, fitted, facts = fit_plan(runs, config)
    sweep = runs[0][0]
    facts.update(source=[str(p) for p in paths], dataset=sweep.dataset, split=sweep.split)
    return plan, fitted, facts


def fit_report(fitted: Sequence[FittedLevel], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The ``fit`` section written beside the plan: the facts and each level's figures."""
    return {
        **facts,
        "levels": [
            {
                "n": f.n,
                "target_flops": f.target_flops,
                "expected_accuracy": f.accuracy,
                "expected_flops": f.flops,
                "feasible": f.feasible,
                "reference_accuracy": f.reference_accuracy,
                "best_fixed": None if f.best_fixed is None else dict(zip(
                    ("strategy", "budget", "accuracy", "flops"), f.best_fixed)),
                "bins": [{"arm": a.arm.describe(), "accuracy": a.accuracy, "flops": a.flops}
                         for a in f.chosen],
            }
            for f in fitted
        ],
    }


def fit_markdown(fitted: Sequence[FittedLevel], facts: Mapping[str, Any], reference: str) -> str:
    """The fitted plan as a table: per level, the arm per bin and the expected (in-sample) figures."""
    edges = list(facts["edges"])
    bounds = [-math.inf, *edges, math.inf]
    names = [f"[{lo:.3g}, {hi:.3g}) ({size})" for lo, hi, size in zip(bounds, bounds[1:], facts["bin_sizes"])]
    lines = [
        f"Plan fitted on {facts['problems']} problems ({facts.get('dataset', '?')} "
        f"{facts.get('split') or ''}), probe {facts['probe']}, feature leader_mass "
        f"({facts['aggregation']}); bins by feature (problems), hardest first. Figures are in-sample.",
        "",
        "| level n | " + " | ".join(names) + f" | expected acc | mean FLOPs | {reference} acc | best fixed |",
        "|---|" + "---|" * (len(names) + 4),
    ]
    for f in fitted:
        arms = " | ".join(f"{a.arm.describe()} ({100 * a.accuracy:.0f}%)" for a in f.chosen)
        best = "-" if f.best_fixed is None else \
            f"{f.best_fixed[0]} n={f.best_fixed[1]} {100 * f.best_fixed[2]:.1f}%"
        flag = "" if f.feasible else " (target below the probe's cost)"
        lines.append(f"| {f.n} | {arms} | {100 * f.accuracy:.1f}% | {f.flops:.3g} of {f.target_flops:.3g}"
                     f"{flag} | {100 * f.reference_accuracy:.1f}% | {best} |")
    return "\n".join(lines) + "\n"


def compute_spread(rows: Iterable[Mapping[str, Any]], strategy: str) -> list[dict[str, Any]]:
    """Per budget of ``strategy``: problems, accuracy, and the mean, p10, p50 and p90 of the
    per-problem FLOPs (rows without a ledger are left out)."""
    cells: dict[int, list[tuple[bool, float]]] = defaultdict(list)
    for row in rows:
        if row["strategy"] == strategy and row.get("ledger") and not row.get("error"):
            cells[int(row["budget"])].append((bool(row["correct"]), float(row["ledger"]["flops"])))
    out = []
    for budget, values in sorted(cells.items()):
        flops = np.array([f for _, f in values])
        p10, p50, p90 = np.percentile(flops, [10, 50, 90])
        out.append({"budget": budget, "problems": len(values),
                    "accuracy": float(np.mean([c for c, _ in values])), "mean_flops": float(flops.mean()),
                    "p10": float(p10), "p50": float(p50), "p90": float(p90)})
    return out


def arm_breakdown(rows: Iterable[Mapping[str, Any]], strategy: str) -> list[dict[str, Any]]:
    """Where a planner's compute went: per budget and per (bin, arm) its rows' ``report`` names,
    the problems, their share of the budget's rows, accuracy and mean FLOPs. Rows that report no
    bin (older runs, failed searches) are left out; an empty list when none reports one."""
    cells: dict[tuple[int, int, str], list[tuple[bool, float]]] = defaultdict(list)
    totals: dict[int, int] = defaultdict(int)
    for row in rows:
        report = row.get("report") or {}
        if row["strategy"] != strategy or row.get("error") or not row.get("ledger") or "bin" not in report:
            continue
        budget = int(row["budget"])
        totals[budget] += 1
        cells[(budget, int(report["bin"]), str(report.get("arm", "?")))].append(
            (bool(row["correct"]), float(row["ledger"]["flops"])))
    return [{"budget": budget, "bin": bin_, "arm": arm, "problems": len(values),
             "share": len(values) / totals[budget], "accuracy": float(np.mean([c for c, _ in values])),
             "mean_flops": float(np.mean([f for _, f in values]))}
            for (budget, bin_, arm), values in sorted(cells.items())]
