"""A resumable record of PRM scores, written as ``aggregate`` scores saved responses.

Scoring thousands of saved responses with a real PRM takes an hour or more on a CPU. The
journal appends each response's step scores as soon as its batch returns, one JSON line per
response, flushed, so a killed run loses at most the batch in flight. Run again with the same
journal and only the responses it lacks are scored.

The first line is a header naming the scorer (and the step delimiter); a journal written by
another scorer is refused rather than mixed in. Each entry is keyed by the row's position, the
response's position and a digest of the question and response text, so a journal of another
input file never fills in a response it did not score. A torn last line (the run was killed
mid-write) is ignored.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = ["JOURNAL_VERSION", "ScoreJournal", "response_digest"]

JOURNAL_VERSION = 1


def response_digest(question: str, response: str, delimiter: str) -> str:
    """A short digest that ties a journal entry to the exact text it scored."""
    text = json.dumps([question, response, delimiter], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class ScoreJournal:
    """Step scores already paid for, and the file new ones are appended to.

    Args:
        path: the journal file; created (with its folder) when absent.
        scorer: what identifies the scorer: PRM path or name, family, keyword arguments, delimiter.
            A journal whose header names another scorer raises ``ValueError``.
    """

    def __init__(self, path: str | Path, scorer: Mapping[str, Any]) -> None:
        self.path = Path(path).expanduser()
        self.scorer = dict(scorer)
        self._scores: dict[tuple[int, int, str], tuple[float, ...]] = {}
        self._handle: TextIO | None = None
        self.resumed = 0
        if self.path.exists() and self.path.stat().st_size > 0:
            self._read()

    def _read(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict) or header.get("journal") != JOURNAL_VERSION:
            raise ValueError(
                f"{self.path} is not a prmsearch scoring journal (line 1 is not its header); "
                "pass another --journal path or delete the file"
            )
        if header.get("scorer") != self.scorer:
            raise ValueError(
                f"{self.path} holds scores of another scorer ({header.get('scorer')}), not of "
                f"{self.scorer}; pass another --journal path, or delete the file to score anew"
            )
        for number, line in enumerate(lines[1:], start=2):
            try:
                entry = json.loads(line)
                key = (int(entry["row"]), int(entry["response"]), str(entry["digest"]))
                scores = tuple(float(v) for v in entry["scores"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                if number == len(lines):
                    self._drop_torn_tail()  # the run was killed while writing this line
                    break
                raise ValueError(f"{self.path}:{number}: not a journal entry: {line[:80]!r}") from None
            if not all(math.isfinite(v) for v in scores):
                raise ValueError(f"{self.path}:{number}: scores must be finite, got {line[:80]!r}")
            self._scores[key] = scores
        self.resumed = len(self._scores)

    def get(self, row: int, response: int, digest: str) -> tuple[float, ...] | None:
        """The saved step scores of one response, or None when it was not scored yet."""
        return self._scores.get((row, response, digest))

    def __len__(self) -> int:
        return len(self._scores)

    def record(self, row: int, response: int, digest: str, scores: tuple[float, ...]) -> None:
        """Save one response's step scores; the line reaches the file before this returns."""
        if self._handle is None:
            fresh = not self.path.exists() or self.path.stat().st_size == 0
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a", encoding="utf-8")
            if fresh:
                self._handle.write(json.dumps({"journal": JOURNAL_VERSION, "scorer": self.scorer}) + "\n")
        entry = {"row": row, "response": response, "digest": digest, "scores": list(scores)}
        self._handle.write(json.dumps(entry) + "\n")
        self._scores[(row, response, digest)] = tuple(scores)

    def flush(self) -> None:
        """Push appended lines to the file (called once per scored batch)."""
        if self._handle is not None:
            self._handle.flush()

    def close(self) -> None:
        """Flush and close the file."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _drop_torn_tail(self) -> None:
        """Cut a half-written last line off the file, so appended entries start on a clean line."""
        data = self.path.read_bytes().rstrip(b"\n")
        with self.path.open("rb+") as handle:
            handle.truncate(data.rfind(b"\n") + 1)
