"""Where exported trees come from: a bench run saved with ``--save-trees``, a ``label`` run, a
folder of tree files, or single tree files.

:func:`read_sources` yields every readable :class:`~prmsearch.export.problems.ProblemTree` and
records each input it cannot use (a damaged or half-written file, a file that holds the tree of
another problem, a run without trees) as an :class:`ExportError` that names the file and the fix,
so one bad file never stops the export of the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prmsearch.export.problems import (
    ProblemTree,
    TreeFormatError,
    problem_from_graph,
    problem_from_label_rows,
)
from prmsearch.tree_graph import read_tree_graph

__all__ = ["ExportError", "SourceFilter", "read_sources"]

_RESULTS = "results.jsonl"
_LABELS = "labels.jsonl"
_TREES = "trees"


@dataclass(frozen=True)
class ExportError:
    """One input that was skipped: which file, and why (with the fix)."""

    source: str
    message: str

    def __str__(self) -> str:
        return self.message if self.message.startswith(self.source) else f"{self.source}: {self.message}"


@dataclass(frozen=True)
class SourceFilter:
    """Which trees of a bench run to read (None: all)."""

    strategy: str | None = None
    budget: int | None = None
    seed: int | None = None

    def keeps(self, strategy: str, budget: int, seed: int) -> bool:
        return (
            (self.strategy is None or strategy == self.strategy)
            and (self.budget is None or budget == self.budget)
            and (self.seed is None or seed == self.seed)
        )


def _result_rows(run: Path) -> dict[tuple[str, str, int, int], dict[str, Any]]:
    """The run's rows by key (the last one written wins, as on a resume); none when the file is
    missing or damaged, and then the trees are exported without the check against their rows."""
    from prmsearch.benchmarks.sweeps.results import ResultsFolder, ResultsFolderError
    from prmsearch.benchmarks.sweeps.rows import row_key

    if not (run / _RESULTS).is_file():
        return {}
    try:
        return {row_key(row): row for row in ResultsFolder(run).rows()}
    except ResultsFolderError:
        return {}


def _bench_run(run: Path, keep: SourceFilter) -> Iterator[ProblemTree | ExportError]:
    from prmsearch.benchmarks.sweeps.trees import TreesFolder

    folder = TreesFolder.of_run(run)
    rows = _result_rows(run)
    found = False
    for key in folder.saved():
        qid, strategy, budget, seed = key
        if not keep.keeps(strategy, budget, seed):
            continue
        found = True
        path = folder.tree_path(key)
        try:
            tree = problem_from_graph(read_tree_graph(path), str(path))
        except (TreeFormatError, ValueError, OSError) as exc:
            yield ExportError(
                str(path),
                f"{exc}; it is left out (rerun the problem with `prmsearch bench "
                "--resume --retry-errors` to write its tree again)",
            )
            continue
        if tree.problem_id != qid:
            yield ExportError(
                str(path),
                f"holds the tree of problem {tree.problem_id!r}, not of {qid!r} "
                "(the file was moved or copied over); it is left out",
            )
            continue
        row = rows.get(key)
        if row is not None and (
            row.get("gold") not in (None, tree.gold) or row.get("answer") != tree.meta.get("answer")
        ):
            yield ExportError(
                str(path),
                f"does not match its row in {run / _RESULTS} (gold or answer differ): "
                "the tree is of another search; it is left out",
            )
            continue
        yield _with_meta(tree, {"run": str(run), "strategy": strategy, "budget": budget, "seed": seed})
    if not found:
        what = (
            "matching the filters " if (keep.strategy, keep.budget, keep.seed) != (None, None, None) else ""
        )
        yield ExportError(
            str(run),
            f"no saved trees {what}in this run; run `prmsearch bench --save-trees "
            "--out FOLDER` (a --resume adds the trees of what it runs)",
        )


def _with_meta(tree: ProblemTree, extra: dict[str, Any]) -> ProblemTree:
    return replace(tree, meta={**tree.meta, **extra})


def _label_file(path: Path) -> Iterator[ProblemTree | ExportError]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem_id = str(row["problem_id"])
        except (json.JSONDecodeError, KeyError, TypeError):
            yield ExportError(
                f"{path}:{number}", "not a label row (half-written, or another file); it is left out"
            )
            continue
        groups.setdefault(problem_id, []).append(row)
    for rows in groups.values():
        try:
            yield problem_from_label_rows(rows, str(path))
        except TreeFormatError as exc:
            yield ExportError(str(path), str(exc))


def _tree_file(path: Path) -> ProblemTree | ExportError:
    try:
        return problem_from_graph(read_tree_graph(path), str(path))
    except (TreeFormatError, ValueError, OSError) as exc:
        return ExportError(str(path), str(exc))


def _is_tree_file(path: Path) -> bool:
    return (
        path.name.endswith((".json.gz", ".json"))
        and path.name != "manifest.json"
        and not path.name.startswith(("summary", "aggregate"))
    )


def _one_source(path: Path, keep: SourceFilter) -> Iterator[ProblemTree | ExportError]:
    if not path.exists():
        yield ExportError(str(path), "does not exist")
    elif path.is_file():
        if path.name.endswith(".jsonl"):
            yield from _label_file(path)
        elif _is_tree_file(path):
            yield _tree_file(path)
        else:
            yield ExportError(
                str(path), "is neither a tree file (.json, .json.gz) nor a label run's labels.jsonl"
            )
    elif (path / _TREES).is_dir():
        yield from _bench_run(path, keep)
    elif (path / _LABELS).is_file():
        yield from _label_file(path / _LABELS)
    elif (path / _RESULTS).is_file():
        yield ExportError(
            str(path),
            "is a bench run saved without trees; run `prmsearch bench --save-trees "
            "--out FOLDER` (a --resume adds the trees of what it runs)",
        )
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and _is_tree_file(p))
        if not files:
            yield ExportError(
                str(path),
                "holds no trees: give a bench run saved with --save-trees, a label "
                "run, or a folder of tree files (prmsearch solve --tree T.json)",
            )
        for file in files:
            yield _tree_file(file)


def read_sources(
    paths: Sequence[str | Path], keep: SourceFilter | None = None
) -> Iterator[ProblemTree | ExportError]:
    """Every tree of every input, and an :class:`ExportError` for each one that cannot be used.

    Two trees that claim one problem id but ask different questions cannot both be right: the
    later one is reported and left out.
    """
    keep = keep or SourceFilter()
    questions: dict[str, tuple[str, str]] = {}
    for raw in paths:
        for item in _one_source(Path(raw).expanduser(), keep):
            if isinstance(item, ProblemTree):
                known = questions.setdefault(item.problem_id, (item.question, item.source))
                if known[0] != item.question:
                    item = ExportError(
                        item.source,
                        f"asks another question than {known[1]} for problem "
                        f"{item.problem_id!r} (a tree of another question); it is left out",
                    )
            yield item
