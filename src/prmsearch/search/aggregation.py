"""Aggregation of PRM step scores into one path score: ``min``, ``last``, ``prod``, ``mean``.

``min`` and ``prod`` follow "The Lessons of Developing Process Reward Models" (a path is as good as
its weakest step); ``last`` is search-and-learn's default. The tree keeps running statistics,
so :func:`path_score` is O(1) per node; :func:`aggregate_scores` works on plain arrays for
offline re-aggregation.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import TypeVar

from prmsearch.tree import SearchTree

E = TypeVar("E", bound=enum.Enum)


class Aggregation(str, enum.Enum):
    """How step scores combine into a path score."""

    MIN = "min"
    LAST = "last"
    PROD = "prod"
    MEAN = "mean"

    @classmethod
    def parse(cls, value: Aggregation | str, field: str = "aggregation") -> Aggregation:
        """Accept an enum member or its name; unknown names list the known ones."""
        return parse_enum(cls, value, field)


def parse_enum(cls: type[E], value: E | str, field: str) -> E:
    """Convert ``value`` to member of enum ``cls`` or raise a ValueError naming the choices."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        known = ", ".join(m.value for m in cls)
        raise ValueError(f"{field} must be one of {known}; got {value!r}") from None


def path_score(tree: SearchTree, node: int, aggregation: Aggregation) -> float:
    """Aggregated score of the path to ``node`` (NaN when a step on it is unscored)."""
    if aggregation is Aggregation.LAST:
        return tree.score[node]
    if aggregation is Aggregation.MIN:
        return tree.path_min[node]
    if aggregation is Aggregation.PROD:
        return tree.path_prod[node]
    depth = tree.depth[node]
    return tree.path_sum[node] / depth if depth else math.nan


def path_scores(tree: SearchTree, nodes: Sequence[int], aggregation: Aggregation) -> list[float]:
    """:func:`path_score` of each of ``nodes`` (NaN where unscored), the column chosen once: a
    strategy weighting a round's paths calls this, not ``path_score`` per node."""
    if aggregation is Aggregation.LAST:
        column = tree.score
    elif aggregation is Aggregation.MIN:
        column = tree.path_min
    elif aggregation is Aggregation.PROD:
        column = tree.path_prod
    else:
        column = None
    if column is not None:
        values = [column[node] for node in nodes]
    else:
        path_sum, depth = tree.path_sum, tree.depth
        values = [path_sum[node] / depth[node] if depth[node] else math.nan for node in nodes]
    return values


def ranked_path_scores(tree: SearchTree, nodes: Sequence[int], aggregation: Aggregation) -> list[float]:
    """:func:`ranking_key` of :func:`path_score` for each of ``nodes``, the column chosen once
    (a strategy ranking a round's candidates calls this, not ``path_score`` per node)."""
    values = path_scores(tree, nodes, aggregation)
    return [-math.inf if value != value else value for value in values]  # NaN ranks last


def aggregate_scores(scores: Sequence[float], aggregation: Aggregation | str) -> float:
    """Aggregate a plain sequence of step scores (NaN for an empty sequence)."""
    aggregation = Aggregation.parse(aggregation)
    values = [float(s) for s in scores]
    if not values:
        return math.nan
    if aggregation is Aggregation.LAST:
        return values[-1]
    if aggregation is Aggregation.MIN:
        return min(values)
    if aggregation is Aggregation.PROD:
        return math.prod(values)
    return sum(values) / len(values)


def ranking_key(value: float) -> float:
    """Sort key that ranks NaN (unscored) below every real score."""
    return -math.inf if math.isnan(value) else value
