"""Diverse verifier tree search (Beeching, Tunstall and Rush, 2024).

The budget is split into ``n / width`` independent subtrees. Each is a greedy beam: it proposes
``width`` next steps, keeps only the best by aggregated PRM score, and repeats until that step
is terminal. Subtrees never share nodes below the root, which keeps the final candidates
diverse; the final selection runs over the subtrees' solutions. With ``stop_score`` set, the
search ends as soon as a finished subtree scores at least ``stop_score`` and ``stop_agree``
finished subtrees share its answer (off by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prmsearch.search.aggregation import path_score, ranking_key
from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Selection, select
from prmsearch.search.strategies.common import SearchConfig, require_divides, width_for_budget
from prmsearch.search.strategies.early_stop import prm_settled, validate_prm_stop
from prmsearch.tree import ROOT, SearchTree


@dataclass(frozen=True)
class DVTSConfig(SearchConfig):
    """DVTS.

    Attributes:
        n: generations per step over all subtrees.
        width: next steps proposed per subtree per step; there are ``n / width`` subtrees.
        stop_score: stop early once the best finished subtree's aggregated score is at least this
            (and ``stop_agree`` finished subtrees share its answer); ``None``, the default, never
            stops early.
        stop_agree: how many finished subtrees must share the best one's answer.
    """

    width: int = 4
    selection: Selection = Selection.WEIGHTED
    stop_score: float | None = None
    stop_agree: int = 1

    @classmethod
    def budget_options(cls, budget: int) -> dict[str, Any]:
        """``n`` and ``width = gcd(n, 4)`` (`width_for_budget`): every budget is a valid search."""
        return {"n": budget, "width": width_for_budget(budget)}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_divides(self, self.width)
        validate_prm_stop(self.stop_score, self.stop_agree, self.n // self.width)


def dvts(tree: SearchTree, cfg: DVTSConfig, rng: np.random.Generator) -> SearchGenerator:
    """Run ``n / width`` independent greedy beams, each keeping its best of ``width`` steps."""
    heads = [ROOT] * (cfg.n // cfg.width)
    finished: list[int] = []
    while heads:
        groups = yield Expand(tuple((head, cfg.width) for head in heads))
        heads = []
        for group in groups:
            best = max(group, key=lambda c: (ranking_key(path_score(tree, c, cfg.aggregation)), -c))
            (finished if tree.terminal[best] else heads).append(best)
        if heads and prm_settled(tree, finished, cfg.aggregation, cfg.stop_score, cfg.stop_agree):
            break  # the PRM-guided early stop: the unfinished subtrees are abandoned
    return Choice(select(tree, finished, cfg.selection, cfg.aggregation), tuple(finished))


register_strategy(
    "dvts",
    DVTSConfig,
    dvts,
    "diverse verifier tree search: n/width independent greedy subtrees",
)
