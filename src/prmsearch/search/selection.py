"""Final selection among candidate solutions: ``argmax``, ``majority``, ``weighted``.

``argmax`` is best-of-N by aggregated PRM score; ``majority`` is self-consistency (Wang et al.,
2022) over answer groups; ``weighted`` is PRM-weighted voting (Li et al., 2023; Uesato et al.,
2022): each answer's weight is the sum of its paths' scores. Ties break deterministically:
higher total score, then the earliest node.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from prmsearch.search.aggregation import Aggregation, parse_enum, path_score, ranking_key
from prmsearch.tree import NO_GROUP, SearchTree


class Selection(str, enum.Enum):
    """How the final answer is picked from the candidates."""

    ARGMAX = "argmax"
    MAJORITY = "majority"
    WEIGHTED = "weighted"

    @classmethod
    def parse(cls, value: Selection | str, field: str = "selection") -> Selection:
        """Accept an enum member or its name; unknown names list the known ones."""
        return parse_enum(cls, value, field)


@dataclass(frozen=True, slots=True)
class Vote:
    """The tally of one answer group among the candidates."""

    answer: str
    count: int
    weight: float
    best_node: int


def tally(tree: SearchTree, candidates: Sequence[int], aggregation: Aggregation) -> list[Vote]:
    """Votes per answer group (a node listed twice votes twice), most votes first."""
    counts: dict[int, int] = {}
    weights: dict[int, float] = {}
    best: dict[int, int] = {}
    for node in candidates:
        group = tree.answer_group[node]
        if group == NO_GROUP:
            continue
        score = ranking_key(path_score(tree, node, aggregation))
        weight = 0.0 if score == float("-inf") else score
        counts[group] = counts.get(group, 0) + 1
        weights[group] = weights.get(group, 0.0) + weight
        if group not in best or _better(tree, node, best[group], aggregation):
            best[group] = node
    votes = [Vote(tree.answer_groups[g], counts[g], weights[g], best[g]) for g in counts]
    votes.sort(key=lambda v: (-v.count, -v.weight, v.best_node))
    return votes


def _better(tree: SearchTree, a: int, b: int, aggregation: Aggregation) -> bool:
    sa = ranking_key(path_score(tree, a, aggregation))
    sb = ranking_key(path_score(tree, b, aggregation))
    return sa > sb or (sa == sb and a < b)


def best_by_score(tree: SearchTree, candidates: Sequence[int], aggregation: Aggregation) -> int:
    """The candidate with the highest aggregated score (earliest node on ties)."""
    best = candidates[0]
    for node in candidates[1:]:
        if _better(tree, node, best, aggregation):
            best = node
    return best


def select(
    tree: SearchTree,
    candidates: Sequence[int],
    selection: Selection,
    aggregation: Aggregation,
) -> int:
    """Pick the final node among ``candidates`` (which must not be empty).

    Voting methods count only candidates with an extracted answer; when none has one, they fall
    back to ``argmax`` so that a search always returns its best path.
    """
    if not candidates:
        raise ValueError("select() needs at least one candidate node")
    if selection is Selection.ARGMAX:
        answered = [c for c in candidates if tree.answer_group[c] != NO_GROUP]
        return best_by_score(tree, answered or list(candidates), aggregation)
    votes = tally(tree, candidates, aggregation)
    if not votes:
        return best_by_score(tree, list(candidates), aggregation)
    if selection is Selection.WEIGHTED:
        votes.sort(key=lambda v: (-v.weight, -v.count, v.best_node))
    return votes[0].best_node
