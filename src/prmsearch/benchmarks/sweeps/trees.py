"""Search trees kept beside a sweep's results (``bench --save-trees``): one file per result row.

Layout: ``RUN/trees/<strategy>/n<budget>-s<seed>/<qid>.json.gz``, each a gzip-compressed node-link
JSON tree (:mod:`prmsearch.tree_graph`) whose graph attributes also hold the row's ``qid``,
``budget``, ``seed``, ``gold`` and ``correct``. Names that are not plain (``[A-Za-z0-9._-]``, or
starting with a dot) are percent-encoded.

Why one file per row: the sweep writes a problem's tree (whole, by an atomic rename) *before*
appending its row, so a row never lacks its tree; a run killed in between leaves a tree without
a row, and the resume, which re-runs every problem without a row, writes that problem's tree
again over the same file. A re-run that replaces a row (``--retry-errors``) replaces its tree the
same way. So a resumed run neither loses nor duplicates trees, and no repair pass is needed.
Rows re-selected from a sibling's run (``share_bon_samples``) have no tree of their own: their
tree is the runner's, at the same budget and seed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from prmsearch.benchmarks.sweeps.results import RowKey
from prmsearch.tree_graph import read_tree_graph, write_tree_graph

TREES = "trees"
TREE_SUFFIX = ".json.gz"
_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_CELL = re.compile(r"n(?P<budget>\d+)-s(?P<seed>-?\d+)")


def file_name(text: str) -> str:
    """``text`` as one safe file-name component (percent-encoded unless plain)."""
    if _PLAIN.fullmatch(text):
        return text
    return quote(text, safe="").replace(".", "%2E") if text.startswith(".") else quote(text, safe="")


@dataclass
class TreesFolder:
    """The ``trees`` folder of a run: write a row's tree, find and read them back."""

    path: Path

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @classmethod
    def of_run(cls, run: str | Path) -> TreesFolder:
        """The trees folder of the run folder ``run``."""
        return cls(Path(run) / TREES)

    def tree_path(self, key: RowKey) -> Path:
        """Where the tree of the row ``key`` = (qid, strategy, budget, seed) is kept."""
        qid, strategy, budget, seed = key
        cell = f"n{int(budget)}-s{int(seed)}"
        return self.path / file_name(strategy) / cell / (file_name(qid) + TREE_SUFFIX)

    def write(self, key: RowKey, graph: Mapping[str, Any]) -> Path:
        """Write the tree of row ``key`` (node-link data), replacing any earlier one, atomically."""
        return write_tree_graph(graph, self.tree_path(key))

    def read(self, key: RowKey) -> dict[str, Any]:
        """The tree of row ``key`` as node-link data (FileNotFoundError when none was saved)."""
        return read_tree_graph(self.tree_path(key))

    def saved(self) -> Iterator[RowKey]:
        """The keys of every tree saved, sorted by strategy, budget, seed and qid."""
        if not self.path.is_dir():
            return
        for strategy_dir in sorted(p for p in self.path.iterdir() if p.is_dir()):
            for cell in sorted(p for p in strategy_dir.iterdir() if p.is_dir()):
                match = _CELL.fullmatch(cell.name)
                if match is None:
                    continue
                for tree in sorted(cell.glob("*" + TREE_SUFFIX)):
                    qid = unquote(tree.name[: -len(TREE_SUFFIX)])
                    yield qid, unquote(strategy_dir.name), int(match["budget"]), int(match["seed"])

    def find(
        self, qid: str, strategy: str | None = None, budget: int | None = None, seed: int | None = None
    ) -> list[RowKey]:
        """Keys of the saved trees of problem ``qid`` that match the given strategy, budget and seed."""
        return [
            key for key in self.saved()
            if key[0] == qid
            and (strategy is None or key[1] == strategy)
            and (budget is None or key[2] == budget)
            and (seed is None or key[3] == seed)
        ]  # fmt: skip
