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

Damage: a line that is not a whole JSON row (a torn write in the middle of the file, a disk
fault, a hand edit) is never guessed at or silently dropped. Reading names the file and line;
``open(..., set_aside_damaged=True)`` (``--set-aside-damaged``) moves such lines, with their
line numbers, to ``results.jsonl.damaged`` beside it and rewrites the file without them, so that
their problems run again. A torn last line (a kill mid-write) goes to the same side file.

One writer: :meth:`ResultsFolder.open` takes the folder's lock
(:mod:`~prmsearch.benchmarks.sweeps.folder_lock`) until :meth:`ResultsFolder.close`; a second
process is refused with the holder's PID. The manifest also records a digest of each problem
(its question and gold answer, by id), so a resume after the dataset changed under the same path
is refused, naming the problem, instead of reusing rows graded against the old golds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from prmsearch.benchmarks.sweeps import folder_lock
from prmsearch.benchmarks.sweeps.machine import record_machine
from prmsearch.benchmarks.sweeps.rows import ResultRow, RowKey, row_key
from prmsearch.fixes import Arg, attach, literal

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
DAMAGED_SUFFIX = ".damaged"


class MachineChangedWarning(UserWarning):
    """A run resumed on a machine that computes differently from the one its rows came from."""


class ResultsFolderError(RuntimeError):
    """The output folder cannot be used as asked (existing results, another configuration, a
    damaged file, another process writing into it)."""


class DamagedResultsError(ResultsFolderError):
    """Lines of a results file are not whole rows; the message names the file and the lines, and
    the fix (``set_aside_damaged=True``, ``--set-aside-damaged``) travels on the error."""

    def __init__(self, path: Path, damaged: Sequence[tuple[int, str]]) -> None:
        first, why = damaged[0]
        more = f"; {len(damaged)} damaged lines in all (lines {_numbers(damaged)})" if damaged[1:] else ""
        template = (f"{literal(path)} line {first} is damaged ({literal(why)}){literal(more)}. Resume with "
                    f"{{}} to move the damaged lines to {literal(path.name + DAMAGED_SUFFIX)} (nothing is "
                    "deleted) and run their problems again")
        arg = Arg("set_aside_damaged", "True", python="resume=True, set_aside_damaged=True")
        super().__init__(template.format(arg.spelled_for_python()))
        attach(self, template, (arg,))
        self.path, self.damaged = path, list(damaged)


def _numbers(damaged: Sequence[tuple[int, str]]) -> str:
    numbers = [str(n) for n, _ in damaged[:8]]
    return ", ".join(numbers) + (", ..." if len(damaged) > 8 else "")


def problem_digests(problems: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """A short sha256 of each problem's question and gold, by id: what a run reads of its
    dataset, so that a resume notices an edited file (other golds) under an unchanged path, while
    a resume over more problems (a larger ``--limit`` of ``label``) only adds digests."""
    out = {}
    for qid, question, gold in problems:
        text = json.dumps([str(question), str(gold)], ensure_ascii=False)
        out[str(qid)] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return out


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

    def open(self, config: dict[str, Any], *, resume: bool, set_aside_damaged: bool = False,
             problems: Mapping[str, str] | None = None) -> set[RowKey]:
        """Prepare the folder for ``config``, lock it for this process, and return the keys done.

        Without ``resume`` the folder must hold no results; with it, the recorded configuration
        must equal ``config``, and each problem digest recorded (:func:`problem_digests`) the one
        given for that id (new ids are added; a folder written before digests existed takes them
        on). Damaged lines are an error naming them, unless ``set_aside_damaged`` moves them to the
        side file. The lock is held until :meth:`close`.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock: Path | None = folder_lock.acquire(self.path)
        except folder_lock.FolderInUseError as exc:
            raise ResultsFolderError(str(exc)) from None
        except OSError as exc:
            raise ResultsFolderError(f"cannot write into {self.path} ({exc.strerror or exc}); give a "
                                     "folder this user can write to") from None
        try:
            return self._open_locked(config, resume, set_aside_damaged, dict(problems or {}))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the folder's lock (rows stay readable; a later :meth:`open` locks it again)."""
        key = getattr(self, "_lock", None)
        if key is not None:
            self._lock = None
            folder_lock.release(key)

    def __enter__(self) -> ResultsFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_locked(self, config: dict[str, Any], resume: bool, set_aside_damaged: bool,
                     problems: dict[str, str]) -> set[RowKey]:
        for path in (self.results_path, self.manifest_path):
            if path.exists() and not path.is_file():  # a device or a folder would be read forever
                raise ResultsFolderError(f"{path} is not a regular file; give a run folder that "
                                         "prmsearch wrote, or a new --out folder")
        has_rows = self.results_path.exists() and self.results_path.stat().st_size > 0
        manifest: dict[str, Any] | None = None
        if self.manifest_path.exists():
            manifest = self.read_manifest()
            recorded = manifest.get("config")
            if has_rows and not resume:
                raise ResultsFolderError(
                    f"{self.path} already holds results; pass --resume to continue that run, "
                    "or choose a new --out folder"
                )
            if resume and recorded != config:
                diff = _differences(recorded if isinstance(recorded, dict) else {}, config)
                raise ResultsFolderError(
                    f"{self.path} holds a run with another configuration ({diff}); resuming would "
                    "mix results. Use a new --out folder or the original settings."
                )
            if resume:
                self._check_problems(manifest.get("problems") or {}, problems)
        elif has_rows:
            raise ResultsFolderError(f"{self.results_path} exists without {MANIFEST}; refusing to append")
        if manifest is None or not resume:
            manifest = {
                "config": config,
                "versions": package_versions(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "command": sys.argv,
            }
            if problems:
                manifest["problems"] = problems
            record_machine(manifest)
            self._write_manifest(manifest)
        else:
            added, elsewhere = record_machine(manifest)
            if elsewhere and has_rows:
                warnings.warn(f"{self.path}: {elsewhere}", MachineChangedWarning, stacklevel=3)
            grown = problems and not problems.keys() <= (manifest.get("problems") or {}).keys()
            if grown:  # more problems, or an older folder without digests
                manifest["problems"] = {**(manifest.get("problems") or {}), **problems}
            if grown or added:
                self._write_manifest(manifest)
        self._set_aside_torn_tail()
        parsed = self._parsed()
        damaged = self._damaged(parsed)
        if damaged and not set_aside_damaged:
            raise DamagedResultsError(self.results_path, damaged)
        if damaged:
            self._set_aside(parsed)
        self.compact()  # a run killed between a replacement and its compaction
        return {self.key(row) for row in self.rows()}

    def read_manifest(self) -> dict[str, Any]:
        """The manifest, or an error naming the file when it is not a JSON object."""
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ResultsFolderError(
                f"{self.manifest_path} is damaged ({exc}); it records the run's configuration, so the "
                "rows cannot be trusted to resume: restore it, or start again in a new --out folder"
            ) from None
        if not isinstance(manifest, dict):
            raise ResultsFolderError(f"{self.manifest_path} is damaged (not a JSON object); restore it, "
                                     "or start again in a new --out folder")
        return manifest

    def _check_problems(self, recorded: Mapping[str, str], given: Mapping[str, str]) -> None:
        changed = sorted(q for q in set(recorded) & set(given) if recorded[q] != given[q])
        if changed:
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            raise ResultsFolderError(
                f"{self.path} was run on other contents of its dataset: problem {changed[0]!r}{more} "
                "changed since (its question or gold answer; an edited file under the same path). "
                "Resuming would reuse rows graded against the old golds; use a new --out folder, or "
                "restore the original file"
            )

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        try:
            write_atomically(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise ResultsFolderError(f"cannot write {self.manifest_path} ({exc.strerror or exc}); free space "
                                     "or give a folder this user can write to") from None
        _fsync_folder(self.path)

    @property
    def damaged_path(self) -> Path:
        """The side file that damaged lines are moved to (never deleted)."""
        return self.path / (self.results_name + DAMAGED_SUFFIX)

    def _set_aside_torn_tail(self) -> None:
        """Move a partial last line (a run killed mid-write) to the side file, so appends start on
        a fresh line."""
        path = self.results_path
        if not path.exists():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            number = data.count(b"\n") + 1
            self._record_damaged([(number, data[cut:].decode("utf-8", "replace"))], "a torn last line")
            with path.open("r+b") as handle:
                handle.truncate(cut)
                handle.flush()
                os.fsync(handle.fileno())

    def _set_aside_torn_tail_quietly(self) -> None:
        """After a failed write: cut what half-reached the file, if the disk lets us (the next
        :meth:`open` does it otherwise)."""
        with contextlib.suppress(OSError):
            self._set_aside_torn_tail()

    def _set_aside(self, parsed: Sequence[tuple[int, str, dict[str, Any] | str]]) -> None:
        """Move the damaged lines of ``parsed`` (:meth:`_parsed`) to the side file and rewrite the
        results without them."""
        self._record_damaged([(n, line.rstrip("\n")) for n, line, row in parsed if isinstance(row, str)],
                             "damaged")
        self._rewrite([line for _, line, row in parsed if isinstance(row, dict)])

    def _record_damaged(self, lines: Sequence[tuple[int, str]], why: str) -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self.damaged_path.open("a", encoding="utf-8") as handle:
            for number, text in lines:
                handle.write(json.dumps({"line": number, "why": why, "set_aside": when, "text": text}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _lines(self) -> list[str]:
        """Every complete line of the results file (a torn last line is left out)."""
        if not self.results_path.exists():
            return []
        with self.results_path.open(encoding="utf-8", errors="surrogateescape") as handle:
            return [line for line in handle if line.endswith("\n")]

    def _parsed(self) -> list[tuple[int, str, dict[str, Any] | str]]:
        """(line number, line, row) of every complete non-blank line; where the line is not a
        whole row, the row is the reason instead (a string)."""
        out: list[tuple[int, str, dict[str, Any] | str]] = []
        for number, line in enumerate(self._lines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, and bytes that are not UTF-8
                out.append((number, line, f"not JSON: {exc}"))
                continue
            if not isinstance(row, dict):
                out.append((number, line, "not a JSON object"))
                continue
            try:
                self.key(row)
            except (KeyError, TypeError, ValueError) as exc:
                out.append((number, line, f"a row without its key field {exc}"))
                continue
            out.append((number, line, row))
        return out

    @staticmethod
    def _damaged(parsed: Sequence[tuple[int, str, dict[str, Any] | str]]) -> list[tuple[int, str]]:
        """(line number, why) of every line of ``parsed`` that is not a whole row."""
        return [(number, row) for number, _, row in parsed if isinstance(row, str)]

    def _whole_rows(self) -> list[tuple[int, str, dict[str, Any]]]:
        """:meth:`_parsed` of a file without damage; a damaged line is an error naming it."""
        parsed = self._parsed()
        damaged = self._damaged(parsed)
        if damaged:
            raise DamagedResultsError(self.results_path, damaged)
        return [(number, line, row) for number, line, row in parsed if isinstance(row, dict)]

    def _winners(self) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """(line, row) of each key's last row, in file order, and how many rows were superseded;
        a damaged line is an error naming it (:meth:`open` offers to set such lines aside)."""
        good = [(line, row) for _, line, row in self._whole_rows()]
        last = {self.key(row): index for index, (_, row) in enumerate(good)}
        keep = sorted(last.values())
        return [good[i] for i in keep], len(good) - len(keep)

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
        parsed = self._whole_rows()  # a damaged file is an error here too, never rewritten blind
        keep = [line for _, line, row in parsed if not predicate(row)]
        if len(keep) != len(parsed):
            self._rewrite(keep)
        return len(parsed) - len(keep)

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
        write_atomically(self.results_path, "".join(lines))
        _fsync_folder(self.path)

    def result_rows(self) -> Iterator[ResultRow]:
        """Every complete row, typed."""
        for row in self.rows():
            yield ResultRow.from_dict(row)

    def append(self, row: ResultRow | Mapping[str, Any]) -> None:
        """Append one row (a :class:`ResultRow` or a JSON-ready mapping) and force it to disk."""
        data = row.to_dict() if isinstance(row, ResultRow) else dict(row)
        line = json.dumps(data, allow_nan=False) + "\n"
        try:
            with self.results_path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            self._set_aside_torn_tail_quietly()
            raise ResultsFolderError(
                f"cannot write to {self.results_path} ({exc.strerror or exc}); the rows written before "
                "are kept. Free space (or give the folder back its write permission), then resume with "
                "--resume and the same flags"
            ) from None


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync it and rename it over ``path``:
    a reader (or a crash) sees the old file or the new one, never half of one."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


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


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> str:
    """The settings that differ, as dotted paths (``label.samples: 4 -> 2``): nested mappings are
    compared key by key, so a change names itself instead of a whole configuration."""
    return "; ".join(_changed(old, new, prefix)[:4]) or "unknown difference"


def _changed(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str) -> list[str]:
    out: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out.extend(_changed(a, b, name + "."))
        else:
            out.append(f"{name}: {_short(a)} -> {_short(b)}")
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
