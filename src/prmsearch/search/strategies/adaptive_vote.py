"""Adaptive-Consistency: sample whole solutions in growing rounds, stop once the vote is settled.

Aggarwal, Madaan, Yang and Mausam, 2023, "Let's Sample Step by Step: Adaptive-Consistency for
Efficient Reasoning and Coding with LLMs" (EMNLP 2023). Self-consistency spends its whole budget on
every question, but an easy question's first few samples already agree. This strategy draws
whole solutions in rounds (2, 2, 4, 8, ... by default: a vote after 2, 4, 8, 16 samples), and after
every round asks the stopping rule whether the leading answer is settled; if so it stops and
votes, else it samples the next round, never past the budget ``n``. The default rule is the
paper's Beta criterion (see :mod:`prmsearch.search.strategies.early_stop`). Votes are plain counts
(PRM-free, like self-consistency) or, with ``selection="weighted"``, the answers' summed PRM path
scores (like ``weighted_vote``), which the Beta rule then reads as pseudo-counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Selection, node_candidates, select
from prmsearch.search.strategies.common import SearchConfig
from prmsearch.search.strategies.early_stop import (
    StopRule,
    round_sizes,
    validate_vote_stop,
    vote_is_settled,
)
from prmsearch.tree import ROOT, SearchTree


@dataclass(frozen=True)
class AdaptiveVoteConfig(SearchConfig):
    """Adaptive-Consistency.

    Attributes:
        n: the most whole solutions sampled (the budget; an easy question spends fewer).
        selection: ``majority`` (plain votes, no PRM) or ``weighted`` (votes weighted by the
            ``aggregation`` path score, like ``weighted_vote``; the PRM scores every sample).
        rule: when the vote is settled: ``beta`` (Aggarwal et al., 2023), ``majority`` (the
            leader holds a ``threshold`` share of the votes) or ``none`` (never: one round of ``n``,
            exactly self-consistency or weighted voting).
        threshold: ``beta``: the posterior probability that the leader is the true majority
            (0.95 in the paper); ``majority``: the leader's share of the votes.
        first: samples in the first round (at most ``n``).
        growth: the running total of samples is multiplied by ``growth`` after each round
            (2: a vote after 2, 4, 8, ... samples; 1: one more sample per round, as in the paper).
    """

    selection: Selection = Selection.MAJORITY
    rule: StopRule = StopRule.BETA
    threshold: float = 0.95
    first: int = 2
    growth: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.selection is Selection.ARGMAX:
            raise ValueError(
                "selection must be majority or weighted for adaptive_vote (it stops on a vote), got "
                "argmax; use best_of_n for the best-scored sample"
            )
        object.__setattr__(self, "rule", StopRule.parse(self.rule))
        validate_vote_stop(self.rule, self.threshold, self.first, self.growth)

    @property
    def needs_scores(self) -> bool:
        """Plain votes read no score, so the driver never calls the PRM for them."""
        return self.selection is Selection.WEIGHTED

    def rounds(self) -> list[int]:
        """Samples drawn in each round when the vote never settles (they sum to ``n``)."""
        if self.rule is StopRule.NONE:
            return [self.n]
        return round_sizes(self.n, self.first, self.growth)


def vote_settled(tree: SearchTree, leaves: list[int], cfg: AdaptiveVoteConfig) -> bool:
    """Whether the vote among ``leaves`` is settled by ``cfg.rule``; unanswered samples do not vote."""
    candidates = node_candidates(tree, leaves, cfg.aggregation)
    return vote_is_settled(candidates, cfg.selection is Selection.WEIGHTED, cfg.rule, cfg.threshold)


def adaptive_vote(tree: SearchTree, cfg: AdaptiveVoteConfig, rng: np.random.Generator) -> SearchGenerator:
    """Sample whole solutions round by round until the vote is settled or ``n`` are spent; vote."""
    leaves: list[int] = []
    for size in cfg.rounds():
        (new,) = yield Expand(((ROOT, size),), full_solution=True)
        leaves.extend(new)
        if vote_settled(tree, leaves, cfg):
            break
    return Choice(select(tree, leaves, cfg.selection, cfg.aggregation), tuple(leaves))


register_strategy(
    "adaptive_vote",
    AdaptiveVoteConfig,
    adaptive_vote,
    "whole solutions in growing rounds until the vote is settled (Adaptive-Consistency)",
)
