"""Stopping rules: when a vote is settled, when to stop sampling, when a PRM search may stop early.

Pure arithmetic shared by the adaptive strategies (``adaptive_vote``, ``confidence_vote``) and the
optional PRM-guided early stop of ``beam``, ``dvts`` and ``particle_filter``.

The vote rule ``beta`` is the Beta stopping criterion of Aggarwal, Madaan, Yang and Mausam, 2023,
"Let's Sample Step by Step: Adaptive-Consistency for Efficient Reasoning and Coding with LLMs"
(EMNLP 2023): with ``v1`` votes for the leading answer and ``v2`` for the runner-up, the leader's
share ``p`` of the two has the posterior ``Beta(v1 + 1, v2 + 1)`` under a uniform prior, and the
vote is settled once ``P(p > 1/2)``, the probability that the leader is the true majority of the
two, reaches a threshold (0.95 in the paper). The paper derives it from a Dirichlet posterior over
all answers and keeps only the top two because that is cheap and stops as well. The rule
``majority`` is the simpler supermajority test: the leader holds at least a ``threshold`` share of
the votes cast.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

from prmsearch.search.aggregation import Aggregation, parse_enum, path_score
from prmsearch.search.selection import Ballot, best_by_score, tally_candidates
from prmsearch.tree import NO_GROUP, SearchTree

_TINY = 1e-300


class StopRule(str, enum.Enum):
    """When a vote counts as settled: never (``none``), by the Beta posterior of Adaptive-Consistency
    (``beta``), or by a supermajority share (``majority``)."""

    NONE = "none"
    BETA = "beta"
    MAJORITY = "majority"

    @classmethod
    def parse(cls, value: StopRule | str, field: str = "rule") -> StopRule:
        """Accept an enum member or its name; unknown names list the known ones."""
        return parse_enum(cls, value, field)


def _beta_fraction(x: float, a: float, b: float, iterations: int = 500) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz); it
    converges fast for ``x < (a + 1) / (a + b + 2)``."""
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    fraction = d
    for m in range(1, iterations + 1):
        for term in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + term * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + term / c
            c = c if abs(c) > _TINY else _TINY
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return fraction


def beta_cdf(x: float, a: float, b: float) -> float:
    """``I_x(a, b)``: the probability that a ``Beta(a, b)`` variable is at most ``x`` (a, b > 0)."""
    if not (a > 0 and b > 0):
        raise ValueError(f"beta_cdf needs a > 0 and b > 0, got a={a}, b={b}")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def leader_probability(top: float, second: float) -> float:
    """``P(p > 1/2)`` for ``p ~ Beta(top + 1, second + 1)``: the posterior probability that the
    answer with ``top`` votes is the true majority against the one with ``second`` votes
    (Aggarwal et al., 2023). Votes may be weights (real numbers >= 0), not only counts."""
    return 1.0 - beta_cdf(0.5, top + 1.0, second + 1.0)


def settled(top: float, second: float, total: float, rule: StopRule, threshold: float) -> bool:
    """Whether a vote is settled: ``top`` and ``second`` are the leading and runner-up answers'
    votes (counts or weights), ``total`` all votes cast. No votes is never settled."""
    if rule is StopRule.NONE or top <= 0:
        return False
    if rule is StopRule.BETA:
        return leader_probability(top, second) >= threshold
    return top >= threshold * total


def vote_is_settled(
    candidates: Sequence[Ballot], weighted: bool, rule: StopRule, threshold: float
) -> bool:
    """Whether the vote of ``candidates`` (answer groups; by weight or by count) is settled by
    ``rule``: the leader against the runner-up out of the total. No answered vote: not settled."""
    tallies = tally_candidates(candidates)
    if weighted:
        votes = sorted((t.weight for t in tallies), reverse=True)
    else:
        votes = [float(t.count) for t in tallies]
    if not votes:
        return False
    return settled(votes[0], votes[1] if len(votes) > 1 else 0.0, sum(votes), rule, threshold)


def round_sizes(n: int, first: int, growth: float) -> list[int]:
    """Samples per round when sampling up to ``n`` in rounds: the running total starts at
    ``min(first, n)`` and is multiplied by ``growth`` after each round (rounded up, at least one
    more sample per round, never past ``n``). ``round_sizes(16, 2, 2.0) == [2, 2, 4, 8]``: a
    vote is checked after 2, 4, 8 and 16 samples; ``growth=1`` adds one sample per round."""
    totals = [min(first, n)]
    while totals[-1] < n:
        grown = math.ceil(round(totals[-1] * growth, 9))
        totals.append(min(n, max(totals[-1] + 1, grown)))
    return [b - a for a, b in zip([0, *totals], totals)]


def validate_vote_stop(rule: StopRule, threshold: float, first: int, growth: float) -> None:
    """Check the options of a stopping vote (``rule``, ``threshold``, ``first``, ``growth``)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ValueError(f"threshold must be a number, got {threshold!r}")
    if rule is StopRule.BETA and not 0.5 < threshold < 1:
        raise ValueError(
            f"threshold must be in (0.5, 1) with rule=beta (a posterior probability, e.g. 0.95), "
            f"got {threshold!r}"
        )
    if rule is StopRule.MAJORITY and not 0.5 < threshold <= 1:
        raise ValueError(
            f"threshold must be in (0.5, 1] with rule=majority (the leader's share of the votes, "
            f"e.g. 0.8), got {threshold!r}"
        )
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        raise ValueError(f"first must be an int >= 1 (samples in the first round), got {first!r}")
    if isinstance(growth, bool) or not isinstance(growth, (int, float)) or not 1 <= growth < math.inf:
        raise ValueError(
            f"growth must be a number >= 1 (2 doubles the samples every round, 1 adds one), got {growth!r}"
        )


# -- the PRM-guided early stop of the tree searches ---------------------------------------------


def validate_prm_stop(stop_score: float | None, stop_agree: int, most_finished: int) -> None:
    """Check ``stop_score`` and ``stop_agree`` of a tree search that finishes at most
    ``most_finished`` distinct paths (beams, subtrees or particles)."""
    if isinstance(stop_agree, bool) or not isinstance(stop_agree, int) or stop_agree < 1:
        raise ValueError(f"stop_agree must be an int >= 1, got {stop_agree!r}")
    if stop_score is None:
        if stop_agree != 1:
            raise ValueError(
                f"stop_agree={stop_agree} has no effect without stop_score; set stop_score "
                "(e.g. 0.9) to stop early, or drop stop_agree"
            )
        return
    if isinstance(stop_score, bool) or not isinstance(stop_score, (int, float)) or not 0 <= stop_score <= 1:
        raise ValueError(
            f"stop_score must be None (never stop early) or a PRM score in [0, 1], got {stop_score!r}"
        )
    if stop_agree > most_finished:
        raise ValueError(
            f"stop_agree must be <= {most_finished}, the most paths this search can finish with "
            f"these options, got {stop_agree}; lower stop_agree or raise n"
        )


def prm_settled(
    tree: SearchTree,
    finished: Sequence[int],
    aggregation: Aggregation,
    stop_score: float | None,
    stop_agree: int,
) -> bool:
    """Whether a tree search may stop now: the best-scored answered path among ``finished`` scores
    at least ``stop_score`` (by ``aggregation``) and at least ``stop_agree`` distinct finished
    paths share its answer. Never with ``stop_score=None``."""
    if stop_score is None:
        return False
    answered = [node for node in dict.fromkeys(finished) if tree.answer_group[node] != NO_GROUP]
    if not answered:
        return False
    best = best_by_score(tree, answered, aggregation)
    score = path_score(tree, best, aggregation)
    if math.isnan(score) or score < stop_score:
        return False
    group = tree.answer_group[best]
    return sum(1 for node in answered if tree.answer_group[node] == group) >= stop_agree
