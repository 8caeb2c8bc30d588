"""One row of a sweep's ``results.jsonl``: a problem searched by one (strategy, budget, seed) cell.

What a row holds and how it is keyed; :mod:`prmsearch.benchmarks.sweeps.results` keeps the rows
of a run on disk (and re-exports these names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RowKey = tuple[str, str, int, int]


def row_key(row: ResultRow | Mapping[str, Any]) -> RowKey:
    """The identity of a result row: (question id, strategy, budget, seed)."""
    if isinstance(row, ResultRow):
        return row.key
    return (str(row["qid"]), str(row["strategy"]), int(row["budget"]), int(row["seed"]))


@dataclass(frozen=True)
class ResultRow:
    """One line of ``results.jsonl``: one problem searched by one (strategy, budget, seed) cell.

    Built in one place per origin (:func:`prmsearch.benchmarks.sweeps.sweep.result_row` for a search,
    :func:`~prmsearch.benchmarks.sweeps.sweep.error_row` for a problem that could not be searched,
    :func:`prmsearch.benchmarks.sweeps.siblings.sibling_row` for a row re-selected from a sibling's run) and
    written by :meth:`to_dict`, so every row has the same fields in the same order.

    Attributes:
        qid, strategy, budget, seed: the row's identity (:attr:`key`).
        answer: the extracted final answer (None: none, or the search failed).
        gold: the dataset's answer; correct: the grader's verdict on ``answer``.
        score: the chosen path's aggregated score (None: unscored or failed).
        steps, step_scores: the chosen path (empty for derived rows, which keep only candidates).
        ledger: the compute ledger as a dict (None when the search failed before charging).
        error: why the search failed (None when it ran).
        error_kind: the kind of that failure, from the exception's type (``unreachable``,
            ``timeout``, ``context_length``, ``strategy``...; see
            `prmsearch.search.failures.ERROR_KINDS`); None when it ran, or on rows written before
            kinds were recorded.
        candidates: the strategy's final candidates (``answer``, ``group``, ``score``) for offline
            re-selection; None on rows that never had any (error rows).
        derived_from: for a row derived from a sibling strategy's run, that strategy.
        report: what the strategy reported about its run (e.g. the planner's difficulty bin and
            arm, :attr:`~prmsearch.search.driver.SearchResult.report`); None when it said nothing.
        tree: the search tree as node-link data (:func:`prmsearch.tree_graph.result_graph`), set
            only when the sweep saves trees; never written to ``results.jsonl`` (the sweep writes
            it to its own file first, see :mod:`prmsearch.benchmarks.sweeps.trees`).
    """

    qid: str
    strategy: str
    budget: int
    seed: int
    answer: str | None
    gold: str
    correct: bool
    score: float | None
    steps: tuple[str, ...] = ()
    step_scores: tuple[float, ...] = ()
    ledger: Mapping[str, Any] | None = None
    error: str | None = None
    error_kind: str | None = None
    candidates: tuple[Mapping[str, Any], ...] | None = None
    derived_from: str | None = None
    report: Mapping[str, Any] | None = None
    tree: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> RowKey:
        return (str(self.qid), str(self.strategy), int(self.budget), int(self.seed))

    @property
    def derived(self) -> bool:
        """Whether this row was re-selected from a sibling strategy's run (marked * in summaries)."""
        return self.derived_from is not None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to ``results.jsonl`` (optional fields only when set)."""
        data: dict[str, Any] = {
            "qid": self.qid,
            "strategy": self.strategy,
            "budget": self.budget,
            "seed": self.seed,
            "answer": self.answer,
            "gold": self.gold,
            "correct": self.correct,
            "score": self.score,
            "steps": list(self.steps),
            "step_scores": list(self.step_scores),
            "ledger": None if self.ledger is None else dict(self.ledger),
            "error": self.error,
        }
        if self.error_kind is not None:
            data["error_kind"] = self.error_kind
        if self.candidates is not None:
            data["candidates"] = [dict(c) for c in self.candidates]
        if self.derived_from is not None:
            data["derived_from"] = self.derived_from
        if self.report:
            data["report"] = dict(self.report)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResultRow:
        """A row read back from ``results.jsonl``."""
        candidates = data.get("candidates")
        return cls(
            qid=str(data["qid"]),
            strategy=str(data["strategy"]),
            budget=int(data["budget"]),
            seed=int(data["seed"]),
            answer=data.get("answer"),
            gold=str(data["gold"]),
            correct=bool(data["correct"]),
            score=data.get("score"),
            steps=tuple(data.get("steps") or ()),
            step_scores=tuple(data.get("step_scores") or ()),
            ledger=data.get("ledger"),
            error=data.get("error"),
            error_kind=data.get("error_kind"),
            candidates=None if candidates is None else tuple(candidates),
            derived_from=data.get("derived_from"),
            report=data.get("report"),
        )
