"""Exported rows on disk: JSONL, a Hugging Face ``datasets`` folder, Parquet, and a small card.

Layout of ``OUT``: ``data.jsonl`` (one row per line), ``dataset/`` (``Dataset.save_to_disk``,
for ``datasets.load_from_disk``), ``data.parquet`` (for ``load_dataset("parquet", ...)``),
``export.json`` (the card as data) and ``README.md`` (the card as text). Each file is written
beside its final name and renamed into place, so a killed export leaves the old file or the new
one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prmsearch.benchmarks.sweeps.results import write_atomically

__all__ = ["FORMATS", "write_card", "write_rows"]

#: What ``--format`` accepts: ``jsonl``, ``disk`` (save_to_disk) and ``parquet``.
FORMATS = ("jsonl", "disk", "parquet")


def _replace(temporary: Path, final: Path) -> None:
    if final.is_dir():
        shutil.rmtree(final)
    os.replace(temporary, final)


def _dataset(rows: Sequence[Mapping[str, Any]]):
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "writing a Hugging Face dataset needs `datasets`: pip install 'prmsearch[train]' "
            "(or pass --format jsonl)"
        ) from exc
    datasets.disable_progress_bars()  # a bar per tiny write is noise on a command's output
    return datasets.Dataset.from_list([dict(row) for row in rows])


def write_rows(rows: Sequence[Mapping[str, Any]], out: str | Path, formats: Sequence[str]) -> dict[str, str]:
    """Write ``rows`` to ``out`` in every one of ``formats``; returns format -> path written."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown export format {unknown[0]!r}; known: {', '.join(FORMATS)}")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    if "jsonl" in formats:
        final = folder / "data.jsonl"
        write_atomically(final, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        written["jsonl"] = str(final)
    if ("disk" in formats or "parquet" in formats) and rows:
        dataset = _dataset(rows)
        if "disk" in formats:
            final = folder / "dataset"
            temporary = folder / "dataset.tmp"
            if temporary.exists():
                shutil.rmtree(temporary)
            dataset.save_to_disk(str(temporary))
            _replace(temporary, final)
            written["disk"] = str(final)
        if "parquet" in formats:
            final = folder / "data.parquet"
            temporary = folder / "data.parquet.tmp"
            dataset.to_parquet(str(temporary))
            _replace(temporary, final)
            written["parquet"] = str(final)
    return written


def _card_text(card: Mapping[str, Any]) -> str:
    counts = card["counts"]
    config = card["config"]
    lines = [
        f"# prmsearch export: {config['kind']} ({config['style']})",
        "",
        f"{counts['rows']} rows from {counts['problems_with_rows']} of {counts['problems_read']} problems "
        f"read from {len(card['sources'])} source(s). Made by `{card['command']}`.",
        "",
        "| what | value |",
        "|---|---|",
    ]
    for key in ("sources", "policy", "prm", "strategy", "budget"):
        value = card.get(key)
        if value:
            shown = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
            lines.append(f"| {key} | {shown} |")
    for key, value in config.items():
        lines.append(f"| {key} | {json.dumps(value)} |")
    for key, value in counts.items():
        lines.append(f"| {key.replace('_', ' ')} | {value} |")
    errors = card.get("errors") or []
    if errors:
        lines += ["", f"{len(errors)} input(s) left out:", ""] + [f"- {e}" for e in errors[:50]]
    load = {
        "jsonl": 'load_dataset("json", data_files="data.jsonl")',
        "disk": 'load_from_disk("dataset")',
        "parquet": 'load_dataset("parquet", data_files="data.parquet")',
    }
    lines += ["", "Load it with `datasets`: " + "; ".join(f"`{load[f]}`" for f in card["files"]), ""]
    return "\n".join(lines)


def write_card(card: Mapping[str, Any], out: str | Path) -> None:
    """``export.json`` and ``README.md`` describing the export (sources, settings, counts, errors)."""
    folder = Path(out)
    write_atomically(folder / "export.json", json.dumps(card, indent=2, default=str) + "\n")
    write_atomically(folder / "README.md", _card_text(card))
