"""REBASE: reward-balanced search (Wu et al., 2024, "Inference Scaling Laws").

At every depth the remaining budget of ``n`` generations is spread over the frontier in
proportion to ``softmax(score / temperature)``: node ``i`` gets ``round(budget * w_i)`` children
(largest-remainder rounding, so the counts add up exactly), and nodes that get none are pruned.
Each finished solution spends one unit of the budget; the search ends when it is spent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prmsearch.search.aggregation import Aggregation, path_score
from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Selection, select
from prmsearch.search.strategies.common import SearchConfig, require_positive
from prmsearch.tree import ROOT, SearchTree


@dataclass(frozen=True)
class RebaseConfig(SearchConfig):
    """REBASE.

    Attributes:
        n: number of finished solutions to collect (and width of the first step).
        temperature: balance temperature; lower concentrates the budget on the best nodes.
    """

    aggregation: Aggregation = Aggregation.LAST
    selection: Selection = Selection.WEIGHTED
    temperature: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("temperature", self.temperature)


def balanced_counts(scores: np.ndarray, budget: int, temperature: float) -> np.ndarray:
    """Split ``budget`` over nodes by ``softmax(scores / temperature)`` with exact rounding."""
    values = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=0.0) / temperature
    weights = np.exp(values - values.max())
    shares = budget * weights / weights.sum()
    counts: np.ndarray = np.floor(shares).astype(int)
    remainder = budget - int(counts.sum())
    order = np.argsort(-(shares - counts), kind="stable")
    counts[order[:remainder]] += 1
    return counts


def rebase(tree: SearchTree, cfg: RebaseConfig, rng: np.random.Generator) -> SearchGenerator:
    """Reward-balanced expansion until ``n`` solutions are finished."""
    budget = cfg.n
    finished: list[int] = []
    requests: tuple[tuple[int, int], ...] = ((ROOT, cfg.n),)
    while requests:
        groups = yield Expand(requests)
        frontier: list[int] = []
        for child in (c for group in groups for c in group):
            (finished if tree.terminal[child] else frontier).append(child)
        budget = cfg.n - len(finished)
        if budget <= 0 or not frontier:
            break
        scores = np.array([path_score(tree, c, cfg.aggregation) for c in frontier])
        counts = balanced_counts(scores, budget, cfg.temperature)
        requests = tuple((c, int(k)) for c, k in zip(frontier, counts, strict=True) if k > 0)
    if not finished:
        finished = [node for node in tree.leaves() if node != ROOT] or [ROOT]
    return Choice(select(tree, finished, cfg.selection, cfg.aggregation), tuple(finished))


register_strategy(
    "rebase",
    RebaseConfig,
    rebase,
    "REBASE: reward-balanced expansion of the frontier until n solutions finish",
)
