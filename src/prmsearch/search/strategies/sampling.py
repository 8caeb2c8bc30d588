"""Parallel sampling: best-of-N, self-consistency and PRM-weighted voting.

All three generate N whole solutions in one round (one request with ``n=N``, stopping only at
the end of the solution); the driver splits each into step nodes and, unless the selection is a
plain majority vote (which reads no score), the PRM scores every step.
They differ only in the final selection: ``argmax`` of the aggregated score (best-of-N,
Cobbe et al. 2021), ``majority`` vote over answers (self-consistency, Wang et al. 2022), or the
PRM-weighted vote (Uesato et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Selection, select
from prmsearch.search.strategies.common import SearchConfig
from prmsearch.tree import ROOT, SearchTree


@dataclass(frozen=True)
class SamplingConfig(SearchConfig):
    """Config of the parallel-sampling strategies: PRM-free exactly when the selection is a
    plain majority vote (its ties then break on the earliest sample, never on a score)."""

    sample_family: ClassVar[str | None] = "whole solutions"

    @property
    def needs_scores(self) -> bool:
        return self.selection is not Selection.MAJORITY


@dataclass(frozen=True)
class BestOfNConfig(SamplingConfig):
    """``n`` whole solutions; pick by ``selection`` (argmax of the ``aggregation`` score)."""


@dataclass(frozen=True)
class SelfConsistencyConfig(SamplingConfig):
    """``n`` whole solutions; majority vote over their answers."""

    selection: Selection = Selection.MAJORITY


@dataclass(frozen=True)
class WeightedVoteConfig(SamplingConfig):
    """``n`` whole solutions; each answer weighted by its paths' aggregated PRM scores."""

    selection: Selection = Selection.WEIGHTED


def sample_and_select(tree: SearchTree, cfg: SearchConfig, rng: np.random.Generator) -> SearchGenerator:
    """Generate ``cfg.n`` full solutions in one round, then apply the final selection."""
    (leaves,) = yield Expand(((ROOT, cfg.n),), full_solution=True)
    return Choice(select(tree, leaves, cfg.selection, cfg.aggregation), tuple(leaves))


@dataclass(frozen=True)
class GreedyConfig(SearchConfig):
    """One greedy (temperature 0) solution: the no-search baseline. ``n`` must be 1."""

    n: int = 1
    fixed_budget: ClassVar[int | None] = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n != 1:
            raise ValueError(f"n must be 1 for greedy decoding (it makes one solution), got {self.n}")

    @property
    def needs_scores(self) -> bool:
        return False


def greedy(tree: SearchTree, cfg: GreedyConfig, rng: np.random.Generator) -> SearchGenerator:
    """Decode one whole solution at temperature 0 (never scored: the PRM chooses nothing)."""
    ((leaf,),) = yield Expand(((ROOT, 1),), full_solution=True, greedy=True)
    return Choice(leaf, (leaf,))


register_strategy("greedy", GreedyConfig, greedy, "one greedy solution, the no-search baseline")
register_strategy(
    "best_of_n",
    BestOfNConfig,
    sample_and_select,
    "N full solutions, the one with the best aggregated PRM score",
)
register_strategy(
    "self_consistency",
    SelfConsistencyConfig,
    sample_and_select,
    "N full solutions, majority vote over extracted answers",
)
register_strategy(
    "weighted_vote",
    WeightedVoteConfig,
    sample_and_select,
    "N full solutions, PRM-weighted majority vote",
)
