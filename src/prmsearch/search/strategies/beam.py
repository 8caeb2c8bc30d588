"""Step-level beam search guided by the PRM (Snell et al., 2024; search-and-learn's ``beam_search``).

Every step spends ``n`` generations: each of the ``n / width`` beams proposes ``width`` next
steps, and the ``n / width`` best candidates by aggregated score survive. A surviving candidate
that is terminal becomes a finished solution and its beam slot is retired, so later steps
spend fewer generations. The search stops when no beam is left or every path hit max depth, or,
with ``stop_score`` set, as soon as a finished beam scores at least ``stop_score`` and
``stop_agree`` finished beams share its answer (off by default). With ``distinct`` a candidate
whose step repeats a sibling's (spacing aside) ranks behind every different one, so the beams
hold as many different paths as there are (after search-and-learn's ``filter_duplicates``, which
also refills the freed slots with copies; off by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prmsearch.search.aggregation import ranked_path_scores
from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import Selection, select
from prmsearch.search.strategies.common import SearchConfig, parse_bool, require_divides, width_for_budget
from prmsearch.search.strategies.early_stop import prm_settled, validate_prm_stop
from prmsearch.tree import ROOT, SearchTree


@dataclass(frozen=True)
class BeamConfig(SearchConfig):
    """Beam search.

    Attributes:
        n: generations per step (the first step samples ``n`` children of the root).
        width: children proposed by each beam; ``n / width`` beams are kept.
        selection: the final pick among finished beams; PRM-weighted voting by default, because
            ``argmax`` lets the verifier's false positives win as candidates multiply
            (docs/strategies/beam.md has the measurement).
        stop_score: stop early once the best finished beam's aggregated score is at least this
            (and ``stop_agree`` finished beams share its answer); ``None``, the default, never stops
            early.
        stop_agree: how many distinct finished beams must share the best one's answer.
        distinct: rank a candidate that repeats a sibling's step (same parent, same text
            spacing aside) behind every different one, so a copy takes a beam slot only where
            no different path claims it (the generations per step stay the same). Off by
            default: copies of a right path add weight to its answer in the final vote
            (docs/strategies/beam.md has the measurement).
    """

    width: int = 4
    selection: Selection = Selection.WEIGHTED
    stop_score: float | None = None
    stop_agree: int = 1
    distinct: bool = False

    @classmethod
    def budget_options(cls, budget: int) -> dict[str, Any]:
        """``n`` and ``width = gcd(n, 4)`` (`width_for_budget`): every budget is a valid search."""
        return {"n": budget, "width": width_for_budget(budget)}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_divides(self, self.width)
        validate_prm_stop(self.stop_score, self.stop_agree, self.beams)
        object.__setattr__(self, "distinct", parse_bool("distinct", self.distinct))

    @property
    def beams(self) -> int:
        """Number of beams kept after every step."""
        return self.n // self.width


def beam_search(tree: SearchTree, cfg: BeamConfig, rng: np.random.Generator) -> SearchGenerator:
    """Keep the ``n / width`` best partial solutions; each proposes ``width`` next steps."""
    finished: list[int] = []
    requests: tuple[tuple[int, int], ...] = ((ROOT, cfg.n),)
    while requests:
        groups = yield Expand(requests)
        candidates = [child for group in groups for child in group]
        keys = ranked_path_scores(tree, candidates, cfg.aggregation)
        order = sorted(range(len(candidates)), key=keys.__getitem__, reverse=True)  # stable on ties
        candidates = [candidates[i] for i in order]
        if cfg.distinct:
            candidates = copies_last(tree, candidates)
        kept = candidates[: cfg.beams - len(finished)]
        finished.extend(c for c in kept if tree.terminal[c])
        requests = tuple((c, cfg.width) for c in kept if not tree.terminal[c])
        if requests and prm_settled(tree, finished, cfg.aggregation, cfg.stop_score, cfg.stop_agree):
            break  # the PRM-guided early stop: a good enough answer, agreed on
    if not finished:
        finished = [node for node in tree.leaves() if node != ROOT] or [ROOT]
    return Choice(select(tree, finished, cfg.selection, cfg.aggregation), tuple(finished))


def copies_last(tree: SearchTree, candidates: list[int]) -> list[int]:
    """``candidates`` (best first) with those whose parent and step text (spacing aside) an
    earlier one already has moved behind all the others: a different path takes a beam slot
    before a copy does, and copies fill the slots no different path claims."""
    seen: set[tuple[int, str]] = set()
    firsts, copies = [], []
    for node in candidates:
        key = (tree.parent[node], tree.step_text[node].strip())
        if key in seen:
            copies.append(node)
        else:
            seen.add(key)
            firsts.append(node)
    return firsts + copies


register_strategy(
    "beam",
    BeamConfig,
    beam_search,
    "step-level beam search: n generations per step, keep the n/width best paths",
)
