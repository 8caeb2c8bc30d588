"""What each path of a tree is worth: its score, whether it is right, and each node's value.

Correctness needs a reference answer. With a gold answer that is the gold; without one it can be
the PRM-weighted vote of the tree's own answers (the pseudo-label of test-time RL, TTRL); or no
answer at all, and then paths are only ranked by their PRM scores. A node's value is the share of
the finished paths below it that are right (a Monte Carlo estimate from the tree's own rollouts),
or, when nothing is graded, the best path score below it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from prmsearch.export.problems import ProblemTree
from prmsearch.search.aggregation import ranking_key
from prmsearch.search.selection import Ballot, choose

__all__ = ["REFERENCES", "PathValues", "tree_values"]

#: Where a path's correctness comes from: ``auto`` (gold where the tree has it, else the vote),
#: ``gold`` (trees without gold are skipped), ``vote`` (always the PRM-weighted vote), ``score``
#: (nothing is graded: paths are ranked by score).
REFERENCES = ("auto", "gold", "vote", "score")


@dataclass(frozen=True)
class PathValues:
    """The graded tree.

    Attributes:
        reference: the answer paths were graded against (None: ungraded).
        reference_kind: ``gold``, ``vote`` or ``score`` (ungraded).
        path_score: per terminal node, the path's PRM score under the chosen aggregation (NaN:
            unscored).
        correct: per terminal node, whether its answer equals the reference (empty: ungraded).
        value: per node, the share of right paths below it (graded), or the best path score below
            it (ungraded); NaN where no finished path lies below.
        finished_below: per node, how many finished paths lie below it.
    """

    reference: str | None
    reference_kind: str
    path_score: dict[int, float]
    correct: dict[int, bool]
    value: list[float]
    finished_below: list[int]


def _vote(tree: ProblemTree, scores: dict[int, float]) -> int | None:
    """The terminal node the PRM-weighted vote picks (None when no path has an answer)."""
    terminals = [t for t in tree.terminals() if t in tree.answer_keys]
    if not terminals:
        return None
    candidates = [Ballot(tree.answer_keys[t], ranking_key(scores[t]), t) for t in terminals]
    return terminals[choose(candidates, "weighted")]


def tree_values(
    tree: ProblemTree,
    aggregation: str,
    reference: str,
    equivalent: Callable[[str | None, str], bool],
) -> PathValues | None:
    """Grade ``tree``; None when ``reference`` is ``gold`` and the tree has no gold answer.

    ``equivalent(answer, reference)`` is the grader (the benchmark's :func:`is_equivalent`); it is
    called once per distinct answer.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    terminals = tree.terminals()
    scores = {t: tree.nodes[t].path_scores.get(aggregation, math.nan) for t in terminals}
    kind = reference
    answer: str | None = None
    if reference in ("auto", "gold"):
        if tree.gold is not None:
            kind, answer = "gold", tree.gold
        elif reference == "gold":
            return None
        else:
            kind = "vote"
    if kind == "vote":
        picked = _vote(tree, scores)
        answer = None if picked is None else tree.nodes[picked].answer
        if answer is None:
            kind = "score"
    correct: dict[int, bool] = {}
    if answer is not None:
        verdicts: dict[str, bool] = {}
        for t in terminals:
            said = tree.nodes[t].answer
            if said is None:
                correct[t] = False
            else:
                if said not in verdicts:
                    verdicts[said] = bool(equivalent(said, answer))
                correct[t] = verdicts[said]
    value, below = _node_values(tree, correct, scores)
    return PathValues(answer, kind if answer is not None else "score", scores, correct, value, below)


def _node_values(
    tree: ProblemTree, correct: dict[int, bool], scores: dict[int, float]
) -> tuple[list[float], list[int]]:
    """Each node's value and count of finished paths below it, children before parents."""
    count = [0] * len(tree.nodes)
    right = [0] * len(tree.nodes)
    best = [-math.inf] * len(tree.nodes)
    for t in scores:
        count[t] += 1
        right[t] += int(correct.get(t, False))
        if not math.isnan(scores[t]):
            best[t] = max(best[t], scores[t])
    for index in range(len(tree.nodes) - 1, 0, -1):
        parent = tree.nodes[index].parent
        count[parent] += count[index]
        right[parent] += right[index]
        best[parent] = max(best[parent], best[index])
    graded = bool(correct)
    value = []
    for index in range(len(tree.nodes)):
        if not count[index]:
            value.append(math.nan)
        elif graded:
            value.append(right[index] / count[index])
        else:
            value.append(best[index] if best[index] > -math.inf else math.nan)
    return value, count
