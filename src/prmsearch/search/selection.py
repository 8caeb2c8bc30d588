"""Final selection among candidate solutions: ``argmax``, ``majority``, ``weighted``.

``argmax`` is best-of-N by aggregated PRM score; ``majority`` is self-consistency (Wang et al.,
2022) over answer groups; ``weighted`` is PRM-weighted voting (Li et al., 2023; Uesato et al.,
2022): each answer's weight is the sum of its paths' scores. Ties break deterministically:
higher total score, then the earliest node.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import cast

from prmsearch.search.aggregation import Aggregation, parse_enum, ranked_path_scores
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
class Ballot:
    """One finished solution as final selection sees it: a vote for its answer group, weighted by
    its score, wherever it comes from (a tree node, a stored benchmark row, a re-scored response).

    Attributes:
        group: the answer group; ``None`` when no answer was extracted.
        score: the aggregated path score as a ranking key (``-inf`` when unscored).
        order: the tie-break, lower first (a node id, or the position in a list).
    """

    group: Hashable | None
    score: float
    order: int


@dataclass(frozen=True, slots=True)
class GroupTally:
    """Votes of one answer group: how many candidates, their summed score, and the best one's
    index in the candidate list."""

    group: Hashable
    count: int
    weight: float
    best: int


def _beats(a: Ballot, b: Ballot) -> bool:
    return a.score > b.score or (a.score == b.score and a.order < b.order)


def best_index(candidates: Sequence[Ballot], indices: Sequence[int]) -> int:
    """The index (of ``indices``) whose candidate has the highest score, lowest order on ties."""
    best = indices[0]
    for i in indices[1:]:
        if _beats(candidates[i], candidates[best]):
            best = i
    return best


def tally_candidates(candidates: Sequence[Ballot]) -> list[GroupTally]:
    """Votes per answer group (unanswered candidates do not vote; a candidate listed twice votes
    twice; unscored ones weigh nothing), most votes first, then largest weight, then best order."""
    members: dict[Hashable, list[int]] = {}
    for i, candidate in enumerate(candidates):
        if candidate.group is not None:
            members.setdefault(candidate.group, []).append(i)
    tallies = []
    for group, indices in members.items():
        weight = 0.0
        for i in indices:
            score = candidates[i].score
            weight += 0.0 if score == -math.inf else score
        tallies.append(GroupTally(group, len(indices), weight, best_index(candidates, indices)))
    tallies.sort(key=lambda v: (-v.count, -v.weight, candidates[v.best].order))
    return tallies


def choose(candidates: Sequence[Ballot], selection: Selection | str) -> int:
    """THE final selection: the index of the candidate that ``selection`` picks.

    ``argmax`` takes the best-scored answered candidate; ``majority`` the answer group with the most
    votes (ties: larger summed score, then the best member's order); ``weighted`` the group with the
    largest summed score (ties: more votes, then order); the pick within a group is its best-scored
    member. Voting counts only answered candidates; when none has an answer every method falls back
    to ``argmax`` over all of them, so a search always returns its best path. The tree search, the
    best-of-N derivation of benchmark rows and offline re-aggregation all call this function.
    """
    if not candidates:
        raise ValueError("choose() needs at least one candidate")
    selection = Selection.parse(selection)
    answered = [i for i, c in enumerate(candidates) if c.group is not None]
    if selection is Selection.ARGMAX or not answered:
        return best_index(candidates, answered or list(range(len(candidates))))
    tallies = tally_candidates(candidates)
    if selection is Selection.WEIGHTED:
        tallies.sort(key=lambda v: (-v.weight, -v.count, candidates[v.best].order))
    return tallies[0].best


# -- the same selection over nodes of a search tree ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Vote:
    """The tally of one answer group among a tree's candidate nodes."""

    answer: str
    count: int
    weight: float
    best_node: int


def node_candidates(tree: SearchTree, nodes: Sequence[int], aggregation: Aggregation) -> list[Ballot]:
    """The nodes as selection candidates: answer group, aggregated score, node id as the order
    (the scores read as one column: a finished problem ranks all its candidates)."""
    groups = tree.answer_group
    return [
        Ballot(None if groups[node] == NO_GROUP else int(groups[node]), score, int(node))
        for node, score in zip(nodes, ranked_path_scores(tree, nodes, aggregation))
    ]


def tally(tree: SearchTree, candidates: Sequence[int], aggregation: Aggregation) -> list[Vote]:
    """Votes per answer group among ``candidates`` nodes, most votes first."""
    tallies = tally_candidates(node_candidates(tree, candidates, aggregation))
    return [  # node_candidates' groups are the tree's int answer groups
        Vote(tree.answer_groups[cast(int, t.group)], t.count, t.weight, candidates[t.best]) for t in tallies
    ]


def best_by_score(tree: SearchTree, candidates: Sequence[int], aggregation: Aggregation) -> int:
    """The candidate node with the highest aggregated score (earliest node on ties)."""
    cands = node_candidates(tree, candidates, aggregation)
    return candidates[best_index(cands, list(range(len(cands))))]


def select(
    tree: SearchTree,
    candidates: Sequence[int],
    selection: Selection,
    aggregation: Aggregation,
) -> int:
    """Pick the final node among ``candidates`` (which must not be empty) with :func:`choose`."""
    if not candidates:
        raise ValueError("select() needs at least one candidate node")
    return candidates[choose(node_candidates(tree, candidates, aggregation), selection)]


def __getattr__(name: str) -> object:
    """``Candidate``, this class's former name (``prmsearch.search.results.Candidate`` is a
    result's candidate), still works for one release, with a DeprecationWarning."""
    if name == "Candidate":
        import warnings

        warnings.warn("prmsearch.search.selection.Candidate is now Ballot", DeprecationWarning, stacklevel=2)
        return Ballot
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
