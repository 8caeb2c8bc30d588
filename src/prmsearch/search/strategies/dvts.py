"""Diverse verifier tree search (Beeching, Tunstall and Rush, 2024).

The budget is split into ``n / width`` independent subtrees. Each is a greedy beam: it proposes
``width`` next steps, keeps only the best by aggregated PRM score, and repeats until that step
is terminal. Subtrees never share nodes below the root, which keeps the final candidates
diverse; the final selection runs over the subtrees' solutions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prmsearch.search.aggregation import path_score, ranking_key
from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Selection, select
from prmsearch.search.strategies.common import SearchConfig, require_divides
from prmsearch.tree import ROOT, SearchTree


@dataclass(frozen=True)
class DVTSConfig(SearchConfig):
    """DVTS.

    Attributes:
        n: generations per step over all subtrees.
        width: next steps proposed per subtree per step; there are ``n / width`` subtrees.
    """

    width: int = 4
    selection: Selection = Selection.WEIGHTED

    def __post_init__(self) -> None:
        super().__post_init__()
        require_divides(self, self.width)


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
    return Choice(select(tree, finished, cfg.selection, cfg.aggregation), tuple(finished))


register_strategy(
    "dvts",
    DVTSConfig,
    dvts,
    "diverse verifier tree search: n/width independent greedy subtrees",
)
