"""Numbered lines of a text file where one bad line is that line's problem, not the whole file's.

Python's text mode raises ``UnicodeDecodeError`` for the first byte that is not UTF-8, naming
neither the file nor the line, and ends the read. Reading bytes and decoding each line on its own
lets every reader of JSONL (datasets, label runs, PRM evaluation files) say ``FILE:LINE: not
UTF-8 text`` and, where the reader allows it, skip that line and read on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str | None, str | None]]:
    """(line number, text, problem) for every non-blank line of ``path``: ``text`` is the decoded
    line, or None with ``problem`` saying why (a byte that is not UTF-8, and where it is)."""
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                byte = raw[exc.start : exc.start + 1].hex()
                yield number, None, f"not UTF-8 text (byte 0x{byte} at column {exc.start + 1})"
                continue
            if text.strip():
                yield number, text, None


def json_rows(path: str | Path, hint: str = "") -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of a JSONL file; the first line that is
    not UTF-8 or not JSON is a ValueError ``FILE:LINE: why`` (with ``hint``, the fix, appended)."""
    tail = f"; {hint}" if hint else ""
    for number, line, problem in numbered_lines(path):
        if line is None:
            raise ValueError(f"{path}:{number}: {problem}{tail}")
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno}){tail}") from None
