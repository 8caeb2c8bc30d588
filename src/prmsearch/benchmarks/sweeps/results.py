"""The results folder of a sweep: ``manifest.json`` plus ``results.jsonl``, appended row by row.

Every row is flushed and fsynced as soon as its problem finishes, so a killed run loses at most
the problems in flight. Resuming reads the rows already there (ignoring a torn last line, which is
cut off before appending), skips their keys, and never writes a key twice. A folder is tied to
one configuration: resuming with a different one is refused rather than mixing results.

Replacing a row (``prmsearch bench --resume --retry-errors`` re-runs the rows that ended in an
error): the file is still only appended to, and **the last row for a key wins** when it is read
(:meth:`ResultsFolder.rows`). When the run ends, :meth:`ResultsFolder.compact` rewrites the file
with the winning rows only, into a temporary file that is fsynced and then renamed over
``results.jsonl`` (``os.replace``, atomic). A kill at any moment therefore leaves either the old
file (with a superseded row that readers skip) or the compacted one: nothing is lost and nothing
is counted twice; the next :meth:`~ResultsFolder.open` compacts what a killed run left.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

RowKey = tuple[str, str, int, int]
MANIFEST = "manifest.json"
RESULTS = "results.jsonl"


class ResultsFolderError(RuntimeError):
    """The output folder cannot be used as asked (existing results, another configuration)."""


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


def package_versions() -> dict[str, str]:
    """Versions of the packages that decide results, for the manifest."""
    versions = {"python": platform.python_version()}
    for name in ("prmsearch", "torch", "transformers", "vllm", "numpy", "math-verify"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


@dataclass
class ResultsFolder:
    """Reads and appends a run's rows, one JSONL line each, fsynced as they come; one instance
    per run. A sweep's rows by default; ``results_name`` and ``key`` serve other row kinds (the
    labelling run's solutions), with the same resume, torn-line and last-row-wins rules."""

    path: Path
    results_name: str = RESULTS
    key: Callable[[Mapping[str, Any]], tuple] = row_key

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @property
    def results_path(self) -> Path:
        return self.path / self.results_name

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def open(self, config: dict[str, Any], *, resume: bool) -> set[RowKey]:
        """Prepare the folder for ``config`` and return the keys already done.

        Without ``resume`` the folder must hold no results; with it, the recorded configuration
        must equal ``config``.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        has_rows = self.results_path.exists() and self.results_path.stat().st_size > 0
        if self.manifest_path.exists():
            recorded = json.loads(self.manifest_path.read_text())
            if has_rows and not resume:
                raise ResultsFolderError(
                    f"{self.path} already holds results; pass --resume to continue that run, "
                    "or choose a new --out folder"
                )
            if resume and recorded.get("config") != config:
                diff = _differences(recorded.get("config", {}), config)
                raise ResultsFolderError(
                    f"{self.path} holds a run with another configuration ({diff}); resuming would "
                    "mix results. Use a new --out folder or the original settings."
                )
        elif has_rows:
            raise ResultsFolderError(f"{self.results_path} exists without {MANIFEST}; refusing to append")
        if not self.manifest_path.exists() or not resume:
            manifest = {
                "config": config,
                "versions": package_versions(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "command": sys.argv,
            }
            self.manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        self._repair_torn_tail()
        self.compact()  # a run killed between a replacement and its compaction
        return {self.key(row) for row in self.rows()}

    def _repair_torn_tail(self) -> None:
        """Cut a partial last line (a run killed mid-write) so appends start on a fresh line."""
        path = self.results_path
        if not path.exists():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with path.open("r+b") as handle:
                handle.truncate(cut)

    def _lines(self) -> list[str]:
        """Every complete line of the results file (a torn last line is left out)."""
        if not self.results_path.exists():
            return []
        with self.results_path.open(encoding="utf-8") as handle:
            return [line for line in handle if line.endswith("\n")]

    def _winners(self) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """(line, row) of each key's last row, in file order, and how many rows were superseded."""
        lines = self._lines()
        rows = [json.loads(line) for line in lines]
        last = {self.key(row): index for index, row in enumerate(rows)}
        keep = sorted(last.values())
        return [(lines[i], rows[i]) for i in keep], len(lines) - len(keep)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row in the results file, one per key: the last row written for a key
        supersedes earlier ones (a torn last line is skipped)."""
        winners, _ = self._winners()
        for _, row in winners:
            yield row

    def error_keys(self) -> set[RowKey]:
        """Keys whose (last) row records an error: what ``--retry-errors`` runs again."""
        return {self.key(row) for row in self.rows() if row.get("error")}

    def drop(self, predicate: Callable[[Mapping[str, Any]], bool]) -> int:
        """Remove every row for which ``predicate`` is true (atomically, as :meth:`compact`);
        returns how many were removed. Used to run again what a resume must redo, for example the
        problems of a labelling run that ended in an error."""
        lines = self._lines()
        keep = [line for line in lines if not predicate(json.loads(line))]
        if len(keep) != len(lines):
            self._rewrite(keep)
        return len(lines) - len(keep)

    def compact(self) -> int:
        """Rewrite the results file with one row per key (the last); returns how many superseded
        rows were dropped. Atomic: a temporary file is written, fsynced and renamed over it."""
        winners, dropped = self._winners()
        if not dropped:
            return 0
        self._rewrite([line for line, _ in winners])
        return dropped

    def _rewrite(self, lines: Sequence[str]) -> None:
        """Replace the results file with ``lines``: a temporary file, fsynced, renamed over it."""
        temporary = self.results_path.with_name(self.results_name + ".tmp")
        with temporary.open("w", encoding="utf-8") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.results_path)
        _fsync_folder(self.path)

    def result_rows(self) -> Iterator[ResultRow]:
        """Every complete row, typed."""
        for row in self.rows():
            yield ResultRow.from_dict(row)

    def append(self, row: ResultRow | Mapping[str, Any]) -> None:
        """Append one row (a :class:`ResultRow` or a JSON-ready mapping) and force it to disk."""
        data = row.to_dict() if isinstance(row, ResultRow) else dict(row)
        line = json.dumps(data, allow_nan=False) + "\n"
        with self.results_path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


def _fsync_folder(path: Path) -> None:
    """Make a rename in ``path`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return "; ".join(changed[:4]) or "unknown difference"
