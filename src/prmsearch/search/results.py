"""What a search gives back: each problem's `SearchResult` and its `Candidate` solutions, and the
driver's own `RunStats` (rounds, backend calls, busy time)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prmsearch.search.ledger import Ledger
from prmsearch.search.selection import Vote
from prmsearch.tree import SearchTree


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of the solutions a strategy chose among (for offline re-selection, e.g. subsampling).

    Attributes:
        node: its last node in the tree.
        answer: its extracted answer (None when it has none).
        group: its answer group (equivalent answers share one; ``NO_GROUP`` when no answer).
        score: its aggregated path score under the strategy's aggregation (NaN when unscored).
    """

    node: int
    answer: str | None
    group: int
    score: float


@dataclass
class SearchResult:
    """The outcome of one problem's search.

    Attributes:
        question: the problem.
        strategy: the strategy's registered name.
        answer: the extracted final answer (None when the chosen path has none).
        node: the chosen node id in ``tree``.
        steps: the chosen path's step texts.
        step_scores: the PRM's score for each of those steps.
        score: the chosen path's aggregated score.
        votes: answer tallies over the strategy's candidates, most votes first.
        tree: the whole search tree.
        ledger: compute spent on this problem.
        seed: the problem's seed.
        error: ``"ExceptionType: message"`` when the search failed, else None.
        error_kind: the kind of that failure, from the exception's type (one of
            `prmsearch.search.failures.ERROR_KINDS`: ``unreachable``, ``timeout``,
            ``context_length``, ``strategy``...), else None.
        notes: remarks for the user (e.g. a question outside the models' domain).
        candidates: the strategy's candidates, in the order it listed them (empty on failure).
        report: what the strategy reported about its run (:attr:`Choice.report`, e.g. the
            planner's bin and arm); empty for most strategies and on failure.
    """

    question: str
    strategy: str
    answer: str | None
    node: int
    steps: tuple[str, ...]
    step_scores: tuple[float, ...]
    score: float
    votes: list[Vote]
    tree: SearchTree
    ledger: Ledger
    seed: int
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    candidates: tuple[Candidate, ...] = ()
    report: dict[str, Any] = field(default_factory=dict)
    error_kind: str | None = None

    @property
    def text(self) -> str:
        """The chosen solution, steps joined by blank lines."""
        return "\n\n".join(self.steps)

    def to_dict(self, include_tree: bool = False) -> dict[str, Any]:
        """A JSON-ready dict (the tree only when asked: it can be large)."""
        data: dict[str, Any] = {
            "question": self.question,
            "strategy": self.strategy,
            "answer": self.answer,
            "steps": list(self.steps),
            "step_scores": [None if np.isnan(s) else s for s in self.step_scores],
            "score": None if np.isnan(self.score) else self.score,
            "votes": [{"answer": v.answer, "count": v.count, "weight": v.weight} for v in self.votes],
            "ledger": self.ledger.to_dict(),
            "seed": self.seed,
            "nodes": len(self.tree),
            "error": self.error,
            "error_kind": self.error_kind,
            "notes": list(self.notes),
        }
        if self.report:
            data["report"] = dict(self.report)
        if include_tree:
            data["tree"] = self.tree.to_dict()
        return data

    def to_networkx(self, **attributes: Any) -> Any:
        """The search tree as a ``networkx.DiGraph`` (needs networkx), the chosen path marked and
        the question, strategy, answer, score and ledger as graph attributes
        (:func:`prmsearch.tree_graph.result_graph`)."""
        from prmsearch.tree_graph import result_graph, to_networkx

        return to_networkx(result_graph(self, **attributes))


@dataclass
class RunStats:
    """What the driver itself did: rounds and batched backend calls.

    ``policy_s`` and ``scorer_s`` are the time each backend had a call running; under the async
    schedule they overlap, so ``backend_s`` is the time at least one of them had, and
    ``driver_s`` the rest of the wall time.
    """

    rounds: int = 0
    policy_batches: int = 0
    scorer_batches: int = 0
    policy_s: float = 0.0
    scorer_s: float = 0.0
    wall_s: float = 0.0
    nodes: int = 0
    backend_s: float = 0.0

    def count_call(self, backend: str, seconds: float) -> None:
        """One lock-step backend call of ``seconds``: ``backend`` is "policy" or "scorer"."""
        if backend == "policy":
            self.policy_batches += 1
            self.policy_s += seconds
        else:
            self.scorer_batches += 1
            self.scorer_s += seconds
        self.backend_s += seconds

    @property
    def driver_s(self) -> float:
        """Wall time with no backend call running: the orchestration overhead."""
        return self.wall_s - self.backend_s
