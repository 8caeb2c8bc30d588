"""The results folder of a sweep: ``manifest.json`` plus ``results.jsonl``, appended row by row.

Every row is flushed and fsynced as soon as its problem finishes, so a killed run loses at most
the problems in flight. Resuming reads the rows already there (ignoring a torn last line, which is
cut off before appending), skips their keys, and never writes a key twice. A folder is tied to
one configuration: resuming with a different one is refused rather than mixing results.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

RowKey = tuple[str, str, int, int]
MANIFEST = "manifest.json"
RESULTS = "results.jsonl"


class ResultsFolderError(RuntimeError):
    """The output folder cannot be used as asked (existing results, another configuration)."""


def row_key(row: dict[str, Any]) -> RowKey:
    """The identity of a result row: (question id, strategy, budget, seed)."""
    return (str(row["qid"]), str(row["strategy"]), int(row["budget"]), int(row["seed"]))


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
    """Reads and appends a sweep's rows; one instance per run."""

    path: Path

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS

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
        return {row_key(row) for row in self.rows()}

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

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row in the results file (a torn last line is skipped)."""
        if not self.results_path.exists():
            return
        with self.results_path.open(encoding="utf-8") as handle:
            for line in handle:
                if not line.endswith("\n"):
                    break
                yield json.loads(line)

    def append(self, row: dict[str, Any]) -> None:
        """Append one row and force it to disk."""
        line = json.dumps(row, allow_nan=False) + "\n"
        with self.results_path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return "; ".join(changed[:4]) or "unknown difference"
