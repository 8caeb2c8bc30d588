"""A compute-optimal plan: which strategy, at which budget, for a problem of a given difficulty.

Snell, Lee, Xu and Kumar, 2024, "Scaling LLM Test-Time Compute Optimally can be More Effective
than Scaling Model Parameters" (arXiv:2408.03314): bin the problems by a difficulty the model can
estimate itself, and give each bin the search strategy and budget that does best on it, so easy
problems stop early and hard ones get the compute. The ``planner`` strategy estimates the
difficulty from a cheap probe (:func:`leader_mass` of a few PRM-scored whole solutions) and
follows a :class:`Plan`; ``prmsearch plan fit`` fits one on a validation split.

A plan is plain, validated data (a frozen config, written to and read from JSON by the command
line, never by the strategy):

* ``probe``: what runs first. A number ``k``: ``k`` whole solutions in one round (as
  ``best_of_n``); or an arm (strategy, budget, options), e.g. ``beam`` at 4: a cheap search
  whose own answer stands when the problem looks easy, so the probe is never wasted.
  ``aggregation``: how step scores make a path score (the probe strategy's own must match).
* ``edges``: ascending bin edges on the difficulty feature; bin ``i`` holds the features in
  ``[edges[i-1], edges[i])`` (bin 0 starts at -inf, the last bin ends at +inf), so bin 0 holds
  the least confident, hardest problems.
* ``levels``: one :class:`PlanLevel` per planner budget ``n`` (the ``n`` the planner is run with,
  e.g. a sweep's budget): for each bin, a :class:`PlanArm` (strategy, budget, options); budget 0
  (strategy ``probe``) answers from the probe alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from prmsearch.search.aggregation import Aggregation
from prmsearch.search.protocol import strategy_spec
from prmsearch.search.selection import Ballot, tally_candidates
from prmsearch.search.strategies.sampling import SamplingConfig

#: The plan file's format tag; a file with another tag is refused.
PLAN_FORMAT = "prmsearch-plan/1"

#: The arm strategy name that means "no more search: answer from the probe" (budget 0).
PROBE_ARM = "probe"

#: Strategies a plan may not delegate to: the planner itself (no plans within plans), and MCTS,
#: which reads the visit counts and children already in the tree and would take the probe's
#: samples for expansions of its own.
NOT_DELEGABLE = {"planner": "a planner cannot delegate to a planner",
                 "mcts": "mcts reads the children already in the tree and would take the probe's "
                         "samples for its own expansions"}


def draws_samples(strategy: str) -> bool:
    """Whether a strategy's candidates are independent whole solutions (the best-of-N family: its
    config is a :class:`~prmsearch.search.strategies.sampling.SamplingConfig`), so that a
    best-of-N-family arm after it can take them as its first samples instead of drawing anew."""
    return issubclass(strategy_spec(strategy).config_cls, SamplingConfig)


def leader_mass(candidates: Sequence[Ballot], samples: int) -> float:
    """The difficulty feature: the leading answer's PRM-weighted vote mass per probe sample.

    ``max over answer groups g of (sum of the aggregated path scores of the samples in g) /
    samples``. It lies in [0, 1] and is 1 only when every sample has the same answer and a perfect
    score, so it falls with disagreement, with low PRM scores and with unanswered samples (which
    count in ``samples`` but vote for nothing); an unscored sample weighs 0. Snell et al. (2024)
    bin by the mean PRM score of many samples; agreement is added because a few samples are
    cheap to draw and disagreement among them is the clearest sign of a hard problem.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    weights = [t.weight for t in tally_candidates(candidates)]
    return max(weights, default=0.0) / samples


def bin_index(edges: Sequence[float], feature: float) -> int:
    """The bin of a feature value under ascending ``edges``: the number of edges at or below it
    (bin 0 is below the first edge; a value on an edge belongs to the bin above it)."""
    return sum(1 for edge in edges if edge <= feature)


def _where(path: str, problem: str) -> ValueError:
    return ValueError(f"{path} {problem}")


def _int(path: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _where(path, f"must be an int >= {minimum}, got {value!r}")
    return value


def _mapping(path: str, value: object, known: set[str], required: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _where(path, f"must be a mapping (a JSON object), got {type(value).__name__}")
    unknown = sorted(set(value) - known)
    if unknown:
        raise _where(path, f"has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    missing = sorted(required - set(value))
    if missing:
        raise _where(path, f"lacks the key(s) {', '.join(missing)}")
    return value


@dataclass(frozen=True)
class PlanArm:
    """What a plan does with the problems of one difficulty bin.

    Attributes:
        strategy: a registered strategy name, or ``probe`` (answer from the probe, budget 0).
        budget: the strategy's ``n`` (0 exactly for ``probe``).
        options: the strategy's other options (never ``n``), e.g. ``{"width": 4}``; kept as
            sorted ``(key, value)`` pairs so the arm stays immutable.
    """

    strategy: str
    budget: int
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.options, Mapping):
            object.__setattr__(self, "options", tuple(sorted(self.options.items())))

    def validate(self, path: str) -> None:
        """Check the arm, naming ``path`` (e.g. ``plan.levels[0].arms[2]``) in every error; a
        :class:`Plan` validates each of its arms so."""
        try:
            object.__setattr__(self, "options", tuple((str(k), v) for k, v in self.options))
        except (TypeError, ValueError):
            raise _where(f"{path}.options", f"must be a mapping of options, got {self.options!r}") from None
        if not isinstance(self.strategy, str) or not self.strategy:
            raise _where(f"{path}.strategy", f"must be a strategy name, got {self.strategy!r}")
        if self.strategy == PROBE_ARM:
            if self.budget != 0 or isinstance(self.budget, bool):
                raise _where(f"{path}.budget", f"must be 0 for strategy {PROBE_ARM!r}, got {self.budget!r}")
            if self.options:
                raise _where(f"{path}.options", f"must be empty for strategy {PROBE_ARM!r}")
            return
        _int(f"{path}.budget", self.budget, 1)
        if self.strategy in NOT_DELEGABLE:
            why = NOT_DELEGABLE[self.strategy]
            raise _where(f"{path}.strategy", f"{self.strategy!r} is not allowed: {why}")
        if "n" in dict(self.options):
            raise _where(f"{path}.options", "must not set n: the arm's budget is its n")
        try:
            strategy_spec(self.strategy).configure(n=self.budget, **dict(self.options))
        except ValueError as exc:
            raise _where(path, f"does not build strategy {self.strategy!r}: {exc}") from None

    @property
    def searches(self) -> bool:
        """Whether the arm searches beyond the probe (budget > 0)."""
        return self.budget > 0

    def describe(self) -> str:
        """The arm in words for tables: ``beam n=16, width=4``, or ``probe only`` (budget 0)."""
        if not self.searches:
            return "probe only"
        return f"{self.strategy} n={self.budget}" + "".join(f", {k}={v}" for k, v in self.options)

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "budget": self.budget, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: object, path: str = "arm") -> PlanArm:
        """An arm from JSON data (checked by the :class:`Plan` that holds it)."""
        data = _mapping(path, data, {"strategy", "budget", "options"}, {"strategy", "budget"})
        options = data.get("options") or {}
        if not isinstance(options, Mapping):
            raise _where(f"{path}.options", f"must be a mapping, got {type(options).__name__}")
        return cls(data["strategy"], data["budget"], tuple(sorted(options.items())))


@dataclass(frozen=True)
class PlanLevel:
    """The arms of one planner budget ``n``: one per difficulty bin, hardest bin first."""

    n: int
    arms: tuple[PlanArm, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "arms": [arm.to_dict() for arm in self.arms]}


@dataclass(frozen=True)
class Plan:
    """A compute-optimal plan (see the module docstring); build it from JSON data with
    :meth:`from_dict`, whose errors name the field (``plan.levels[1].arms[0].budget ...``)."""

    probe: int | PlanArm
    edges: tuple[float, ...]
    levels: tuple[PlanLevel, ...]
    aggregation: Aggregation = Aggregation.MIN
    bins: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "aggregation", Aggregation.parse(self.aggregation, "plan.aggregation"))
        if isinstance(self.probe, PlanArm):
            self._check_probe_arm(self.probe)
        elif isinstance(self.probe, bool) or not isinstance(self.probe, int) or self.probe < 1:
            raise _where("plan.probe", "must be a number of whole solutions (an int >= 1) or an arm "
                                       f"({{\"strategy\": ..., \"budget\": ...}}), got {self.probe!r}")
        edges = tuple(self.edges)
        for i, edge in enumerate(edges):
            if isinstance(edge, bool) or not isinstance(edge, (int, float)) or not math.isfinite(edge):
                raise _where(f"plan.edges[{i}]", f"must be a finite number, got {edge!r}")
        if any(b <= a for a, b in pairwise(edges)):
            raise _where("plan.edges", f"must be strictly ascending, got {list(edges)}")
        object.__setattr__(self, "edges", tuple(float(e) for e in edges))
        object.__setattr__(self, "bins", len(edges) + 1)
        object.__setattr__(self, "levels", tuple(self.levels))
        if not self.levels:
            raise _where("plan.levels", "must hold at least one level")
        seen: set[int] = set()
        for i, level in enumerate(self.levels):
            path = f"plan.levels[{i}]"
            if not isinstance(level, PlanLevel):
                raise _where(path, f"must be a PlanLevel, got {type(level).__name__}")
            object.__setattr__(level, "arms", tuple(level.arms))
            _int(f"{path}.n", level.n, 1)
            if level.n in seen:
                raise _where(f"{path}.n", f"repeats level n={level.n}; each n has one level")
            seen.add(level.n)
            if len(level.arms) != self.bins:
                raise _where(f"{path}.arms", f"must hold one arm per bin ({self.bins} for "
                                             f"{len(edges)} edges), got {len(level.arms)}")
            for j, arm in enumerate(level.arms):
                if not isinstance(arm, PlanArm):
                    raise _where(f"{path}.arms[{j}]", f"must be a PlanArm, got {type(arm).__name__}")
                arm.validate(f"{path}.arms[{j}]")

    def _check_probe_arm(self, arm: PlanArm) -> None:
        arm.validate("plan.probe")
        if not arm.searches:
            raise _where("plan.probe", f"must search (a strategy at a budget >= 1), got {arm.strategy!r}; "
                                       "a number k draws k whole solutions")
        config = strategy_spec(arm.strategy).configure(n=arm.budget, **dict(arm.options)).config
        own = Aggregation.parse(getattr(config, "aggregation", self.aggregation))
        if own is not self.aggregation:
            raise _where("plan.probe.options", f"aggregation must be the plan's ({self.aggregation.value}), "
                                               f"the one its bins were fitted with, got {own.value}")

    @property
    def probe_arm(self) -> PlanArm | None:
        """The probe as a strategy arm, or None when it is ``probe`` whole solutions."""
        return self.probe if isinstance(self.probe, PlanArm) else None

    @property
    def probe_draws_samples(self) -> bool:
        """Whether the probe's candidates are whole solutions a best-of-N-family arm extends."""
        arm = self.probe_arm
        return arm is None or draws_samples(arm.strategy)

    @property
    def probe_budget(self) -> int:
        """What the probe spends: its arm's budget, or its number of whole solutions."""
        arm = self.probe_arm
        return arm.budget if arm is not None else int(self.probe)  # type: ignore[arg-type]

    @property
    def probe_text(self) -> str:
        """The probe in words, for tables and messages."""
        arm = self.probe_arm
        return f"{self.probe} whole solutions" if arm is None else arm.describe()

    def bin_of(self, feature: float) -> int:
        """The difficulty bin of a feature value (:func:`bin_index`)."""
        return bin_index(self.edges, feature)

    def level(self, n: int) -> PlanLevel:
        """The level for planner budget ``n``; another ``n`` is an error listing the levels."""
        for level in self.levels:
            if level.n == n:
                return level
        known = ", ".join(str(level.n) for level in self.levels)
        raise ValueError(f"n must be one of the plan's levels ({known}), got {n}; fit the plan "
                         f"for this budget (prmsearch plan fit --levels) or run the planner at a level")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data that :meth:`from_dict` reads back."""
        return {
            "format": PLAN_FORMAT,
            "probe": self.probe.to_dict() if isinstance(self.probe, PlanArm) else self.probe,
            "aggregation": self.aggregation.value,
            "edges": list(self.edges),
            "levels": [level.to_dict() for level in self.levels],
        }

    @classmethod
    def from_dict(cls, data: object) -> Plan:
        """A plan from JSON data; a fitted file's ``fit`` section (figures for readers) is ignored."""
        data = _mapping("plan", data, {"format", "probe", "aggregation", "edges", "levels", "fit"},
                        {"probe", "edges", "levels"})
        tag = data.get("format", PLAN_FORMAT)
        if tag != PLAN_FORMAT:
            raise _where("plan.format", f"must be {PLAN_FORMAT!r}, got {tag!r}")
        for key in ("edges", "levels"):
            if isinstance(data[key], (str, bytes)) or not isinstance(data[key], Sequence):
                raise _where(f"plan.{key}", f"must be a list, got {type(data[key]).__name__}")
        levels = []
        for i, raw in enumerate(data["levels"]):
            path = f"plan.levels[{i}]"
            raw = _mapping(path, raw, {"n", "arms"}, {"n", "arms"})
            if isinstance(raw["arms"], (str, bytes)) or not isinstance(raw["arms"], Sequence):
                raise _where(f"{path}.arms", f"must be a list, got {type(raw['arms']).__name__}")
            arms = tuple(PlanArm.from_dict(arm, f"{path}.arms[{j}]") for j, arm in enumerate(raw["arms"]))
            levels.append(PlanLevel(raw["n"], arms))
        probe = data["probe"]
        if isinstance(probe, Mapping):
            probe = PlanArm.from_dict(probe, "plan.probe")
        return cls(
            probe=probe,
            edges=tuple(data["edges"]),
            levels=tuple(levels),
            aggregation=data.get("aggregation", Aggregation.MIN.value),
        )


#: The default plan (see docs/strategies/planner.md), fitted on the 200 validation problems of the
#: embedded arithmetic models: ``prmsearch plan cv`` (two-fold cross-validation inside the
#: validation split) chose the probe and the bin count, then ``prmsearch plan fit runs/plan-val
#: --probe-strategy beam --probe 4 --bins 5 --levels 4,8,16``. Beam search at 4 runs first and its
#: answer stands unless the PRM doubts its path (path score below 0.814: the hardest fifth of the
#: validation problems); those get particle filtering at 4 (level 4), beam search at 16 (level 8)
#: or particle filtering at 32 (level 16). Fitted on tiny models: for any other models, fit your own.
DEFAULT_PLAN: dict[str, Any] = {
    "format": PLAN_FORMAT,
    "probe": {"strategy": "beam", "budget": 4, "options": {"width": 4}},
    "aggregation": "min",
    "edges": [0.813983, 0.969778, 0.982927, 0.990722],
    "levels": [
        {"n": 4, "arms": [{"strategy": "particle_filter", "budget": 4},
                          *[{"strategy": PROBE_ARM, "budget": 0}] * 4]},
        {"n": 8, "arms": [{"strategy": "beam", "budget": 16, "options": {"width": 4}},
                          *[{"strategy": PROBE_ARM, "budget": 0}] * 4]},
        {"n": 16, "arms": [{"strategy": "particle_filter", "budget": 32},
                           *[{"strategy": PROBE_ARM, "budget": 0}] * 4]},
    ],
}


def write_plan(plan: Plan, path: str | Path, fit: Mapping[str, Any] | None = None) -> None:
    """Write the plan as JSON (with its ``fit`` section, for readers, when given)."""
    data = plan.to_dict()
    if fit is not None:
        data["fit"] = dict(fit)
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file (errors name the file and the field)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{path} must hold a JSON object (a plan), got {type(data).__name__}")
    if data.get("format", PLAN_FORMAT) != PLAN_FORMAT:
        raise ValueError(f"{path}: plan.format must be {PLAN_FORMAT!r}, got {data.get('format')!r}")
    try:
        return Plan.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def plan_file_data(path: str | Path) -> dict[str, Any]:
    """A plan file's validated data: what a ``plan`` option given as a file path becomes at the
    command-line or recipe boundary, so that a run's manifest records the plan itself, not a path
    (the planner's registered file option; the strategy never reads a file)."""
    return load_plan(Path(path).expanduser()).to_dict()
