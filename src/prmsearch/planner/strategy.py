"""A per-problem compute-optimal planner (Snell, Lee, Xu and Kumar, 2024, "Scaling LLM Test-Time
Compute Optimally can be More Effective than Scaling Model Parameters", arXiv:2408.03314).

Snell et al. show that the best test-time strategy and budget depend on the problem's difficulty,
and that a policy choosing them per difficulty bin beats any one fixed strategy at equal compute.
The planner does it per problem in two stages, on one shared tree:

1. **Probe**: what ``plan.probe`` says to run first: ``k`` whole solutions in one round (as
   ``best_of_n`` draws them) chosen among by ``selection``, or a cheap search (a probe arm, e.g.
   ``beam`` at 4) run on the tree. The probe's candidates give the difficulty estimate, their
   :func:`~prmsearch.planner.plan.leader_mass` (the leading answer's PRM-weighted vote mass per
   candidate), and ``plan.edges`` put it in a bin.
2. **Delegate**: the plan's arm for that bin at the planner's level ``n`` names a strategy and a
   budget. Budget 0 answers with the probe's own choice, so an easy problem costs the probe only;
   a search probe is a whole search whose answer stands, and the planner then works as a cascade
   that escalates the problems it doubts. A best-of-N-family arm (``best_of_n``,
   ``self_consistency``, ``weighted_vote``) at budget ``B`` after a probe of whole solutions
   extends the probe: it draws ``B - k`` more and selects among all ``B`` with its own selection
   (:func:`extend_probe`), so its answer is distributed as a fresh run's and the probe is not paid
   twice. Any other arm (and every arm after a search probe) runs that strategy's own algorithm
   on the same tree (``yield from``), so the driver batches and charges its rounds like any other.

The final choice is the delegated strategy's own (``final="delegate"``, the default: it is what
``prmsearch plan fit`` measured per arm) or, with ``final="vote"``, ``selection`` over the probe
samples and the delegate's candidates together. Everything is charged: the probe's generations and
scoring and the delegate's, by the driver. The planner's ``n`` picks the plan's level (the compute
a fitted level aims at on average), not a per-problem cap: a hard problem may spend more than
``n`` generations, an easy one only the probe. The result's ``report`` records the bin, the
difficulty and the arm that ran (a bench row's ``report``), so ``prmsearch plan report`` can show
where the compute went.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from prmsearch.planner.plan import DEFAULT_PLAN, Plan, PlanArm, leader_mass, plan_file_data
from prmsearch.search.aggregation import Aggregation, parse_enum
from prmsearch.search.protocol import (
    Choice,
    Expand,
    SearchGenerator,
    make_strategy,
    register_strategy,
    strategy_spec,
)
from prmsearch.search.selection import Selection, node_candidates, select
from prmsearch.search.strategies.common import SearchConfig
from prmsearch.search.strategies.sampling import SamplingConfig
from prmsearch.tree import ROOT, SearchTree


class FinalPick(str, enum.Enum):
    """Whose choice a delegating planner returns."""

    DELEGATE = "delegate"
    VOTE = "vote"


@dataclass(frozen=True)
class PlannerConfig(SearchConfig):
    """The planner.

    Attributes:
        n: the plan level to follow (one of ``plan``'s levels); a sweep's budget.
        plan: the :class:`~prmsearch.planner.plan.Plan`, or its JSON data (a mapping), validated
            here; None: the default :data:`~prmsearch.planner.plan.DEFAULT_PLAN`. The command
            line reads a plan file (``-o planner.plan=PLAN.json``) before it gets here.
        aggregation: None (default): the plan's, the one its difficulty bins were fitted with;
            given, it must equal the plan's. Also the path score of the final selection.
        selection: the pick among a probe of ``k`` samples when the arm's budget is 0, and among
            probe and delegate candidates with ``final="vote"``; PRM-weighted voting by default.
        final: ``delegate`` (the delegated strategy's own choice) or ``vote`` (``selection`` over
            the probe's candidates and the delegate's).
    """

    plan: Plan | Mapping[str, Any] | None = None
    aggregation: Aggregation | None = None  # type: ignore[assignment]  # None: the plan's
    selection: Selection = Selection.WEIGHTED
    final: FinalPick = FinalPick.DELEGATE

    def __post_init__(self) -> None:
        plan = DEFAULT_PLAN if self.plan is None else self.plan
        if not isinstance(plan, Plan):
            if not isinstance(plan, Mapping):
                raise ValueError(
                    f"plan must be a plan's JSON data (a mapping) or a Plan, got {type(plan).__name__}; "
                    "on the command line, -o planner.plan=PLAN.json reads the file"
                )
            plan = Plan.from_dict(plan)
        object.__setattr__(self, "plan", plan)
        if self.aggregation is None:
            object.__setattr__(self, "aggregation", plan.aggregation)
        super().__post_init__()
        object.__setattr__(self, "final", parse_enum(FinalPick, self.final, "final"))
        assert self.aggregation is not None  # the plan's when it was left out (set above)
        if self.aggregation is not plan.aggregation:
            raise ValueError(
                f"aggregation must be the plan's ({plan.aggregation.value}), the one its difficulty "
                f"bins were fitted with, got {self.aggregation.value}; leave it out to use the plan's"
            )
        plan.level(self.n)  # n must be one of its levels

    @property
    def reads_policy_logprobs(self) -> bool:
        """Whether the probe arm or an arm of level ``n`` reads the policy's log-probabilities
        (an MCTS arm with the policy prior, confidence voting)."""
        plan = self.plan
        assert isinstance(plan, Plan)
        arms = [*plan.level(self.n).arms, plan.probe_arm]
        return any(
            strategy_spec(arm.strategy).configure(n=arm.budget, **dict(arm.options)).needs_logprobs
            for arm in arms if arm is not None and arm.searches
        )

    @property
    def max_budget(self) -> int:
        """The worst case of the plan's level ``n``: the probe (its budget, or its ``k`` samples)
        plus the level's largest arm budget (``n`` itself names a mean compute, not a cap)."""
        plan = self.plan
        assert isinstance(plan, Plan)
        return plan.probe_budget + max(arm.budget for arm in plan.level(self.n).arms)


def probe_difficulty(tree: SearchTree, probe: list[int], plan: Plan) -> float:
    """The probe's candidates' :func:`~prmsearch.planner.plan.leader_mass` under the plan's aggregation."""
    return leader_mass(node_candidates(tree, probe, plan.aggregation), max(len(probe), 1))


def run_probe(tree: SearchTree, cfg: PlannerConfig, rng: np.random.Generator) -> SearchGenerator:
    """The plan's probe: ``k`` whole solutions in one round, chosen among by ``selection``, or the
    probe arm's strategy run on the tree. Returns its :class:`Choice` (the candidates are what the
    difficulty is read from)."""
    plan = cfg.plan
    assert isinstance(plan, Plan)
    assert cfg.aggregation is not None  # the plan's (`PlannerConfig.__post_init__`)
    arm = plan.probe_arm
    if arm is None:  # the probe is a number of whole solutions
        (probe,) = yield Expand(((ROOT, cast(int, plan.probe)),), full_solution=True)
        return Choice(select(tree, probe, cfg.selection, cfg.aggregation), tuple(probe))
    return (yield from make_strategy(arm.strategy, n=arm.budget, **dict(arm.options)).start(tree, rng))


def extend_probe(tree: SearchTree, probe: list[int], cfg: SamplingConfig) -> SearchGenerator:
    """A best-of-N-family arm at budget ``cfg.n`` that keeps the probe as its first samples: draw
    the ``n - probe`` more it needs (none when ``n <= probe``) and select among the first ``n``.
    Its answer is then distributed exactly as a fresh run of the arm (independent whole solutions),
    so the fit's figures for the arm hold, and the probe's compute is not spent twice."""
    leaves = list(probe)
    if cfg.n > len(leaves):
        (more,) = yield Expand(((ROOT, cfg.n - len(leaves)),), full_solution=True)
        leaves.extend(more)
    leaves = leaves[: cfg.n]
    return Choice(select(tree, leaves, cfg.selection, cfg.aggregation), tuple(leaves))


def _arm_report(bin_index: int, difficulty: float, arm: PlanArm) -> tuple[tuple[str, Any], ...]:
    arm_text = "probe" if not arm.searches else f"{arm.strategy}@{arm.budget}"
    return (("bin", bin_index), ("difficulty", round(float(difficulty), 6)), ("arm", arm_text))


def planner(tree: SearchTree, cfg: PlannerConfig, rng: np.random.Generator) -> SearchGenerator:
    """Probe, bin the problem by the probe's confidence, then run the plan's strategy for the bin."""
    plan = cfg.plan
    assert isinstance(plan, Plan)
    assert cfg.aggregation is not None  # the plan's (`PlannerConfig.__post_init__`)
    probe_choice = yield from run_probe(tree, cfg, rng)
    probe = list(probe_choice.candidates)
    difficulty = probe_difficulty(tree, probe, plan)
    bin_index = plan.bin_of(difficulty)
    arm = plan.level(cfg.n).arms[bin_index]
    report = _arm_report(bin_index, difficulty, arm)
    if not arm.searches:
        return Choice(probe_choice.node, probe_choice.candidates, report)
    delegate = make_strategy(arm.strategy, n=arm.budget, **dict(arm.options))
    if isinstance(delegate.config, SamplingConfig) and plan.probe_draws_samples:
        choice = yield from extend_probe(tree, probe, delegate.config)
    else:
        choice = yield from delegate.start(tree, rng)
    if cfg.final is FinalPick.DELEGATE:
        return Choice(choice.node, choice.candidates, report)
    pool = list(dict.fromkeys([*probe, *choice.candidates]))
    return Choice(select(tree, pool, cfg.selection, cfg.aggregation), tuple(pool), report)


register_strategy(
    "planner",
    PlannerConfig,
    planner,
    "compute-optimal planner: a cheap probe search bins the problem by difficulty, a fitted plan "
    "keeps its answer or picks the strategy and budget (Snell et al., 2024)",
    file_options={"plan": plan_file_data},
)
