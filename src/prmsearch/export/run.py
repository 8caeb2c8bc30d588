"""One export from start to end: read the inputs, grade each tree, build the rows, write them.

Every input that cannot be used is recorded (and reported in the card) while the rest is
exported; the export fails only when nothing at all could be read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prmsearch.export.config import ExportConfig
from prmsearch.export.records import Checker, rows_of
from prmsearch.export.sources import ExportError, SourceFilter, read_sources
from prmsearch.export.values import tree_values
from prmsearch.export.writers import write_card, write_rows

__all__ = ["ExportReport", "build_rows", "export_dataset"]


@dataclass
class ExportReport:
    """What an export read, made and left out."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    problems_read: int = 0
    problems_with_rows: int = 0
    skipped: Counter = field(default_factory=Counter)
    errors: list[ExportError] = field(default_factory=list)
    metas: list[Mapping[str, Any]] = field(default_factory=list)  # the trees' meta (for the card)

    def counts(self) -> dict[str, int]:
        out = {
            "problems_read": self.problems_read,
            "problems_with_rows": self.problems_with_rows,
            "rows": len(self.rows),
            "inputs_left_out": len(self.errors),
        }
        out.update({f"problems_{reason}": n for reason, n in sorted(self.skipped.items())})
        return out


def build_rows(
    sources: Sequence[str | Path],
    config: ExportConfig,
    *,
    keep: SourceFilter | None = None,
    equivalent: Callable[[str | None, str], bool] | None = None,
    checker: Checker | None = None,
) -> ExportReport:
    """Read ``sources`` and build the rows of ``config.kind``, problem by problem."""
    if equivalent is None:
        from prmsearch.benchmarks.grading import is_equivalent

        equivalent = is_equivalent
    report = ExportReport()
    for item in read_sources(sources, keep):
        if isinstance(item, ExportError):
            report.errors.append(item)
            continue
        report.problems_read += 1
        report.metas.append(item.meta)
        values = tree_values(item, config.aggregation, config.reference, equivalent)
        if values is None:
            report.skipped["without_gold"] += 1
            continue
        rows = rows_of(item, values, config, checker)
        if rows:
            report.problems_with_rows += 1
            report.rows.extend(rows)
        else:
            report.skipped["without_rows"] += 1
    return report


def _manifests(metas: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for run in sorted({str(m["run"]) for m in metas if "run" in m}):
        try:
            found[run] = json.loads((Path(run) / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
    return found


def _card(
    report: ExportReport,
    config: ExportConfig,
    sources: Sequence[str | Path],
    command: str,
    files: dict[str, str],
) -> dict[str, Any]:
    metas = report.metas
    manifests = _manifests(metas)
    settings = [m.get("config", {}) for m in manifests.values()]
    policies = sorted({str(s.get("policy") or "embedded arithmetic policy") for s in settings})
    prms = sorted({f"{s.get('prm') or 'embedded arithmetic PRM'}"
                   + (f" ({s['prm_family']})" if s.get("prm_family") else "") for s in settings})  # fmt: skip
    labelled = sorted({str(m.get("policy")) for m in metas if m.get("method")})
    return {
        "command": command,
        "sources": [str(s) for s in sources],
        "policy": policies + [p for p in labelled if p not in policies and p != "None"],
        "prm": prms,
        "strategy": sorted({str(m["strategy"]) for m in metas if "strategy" in m}),
        "budget": sorted({int(m["budget"]) for m in metas if "budget" in m}),
        "label_method": sorted({str(m["method"]) for m in metas if m.get("method")}),
        "config": asdict(config),
        "counts": report.counts(),
        "files": sorted(files),
        "errors": [str(e) for e in report.errors],
    }


def export_dataset(
    sources: Sequence[str | Path],
    config: ExportConfig,
    out: str | Path,
    *,
    formats: Sequence[str] = ("jsonl", "disk"),
    keep: SourceFilter | None = None,
    equivalent: Callable[[str | None, str], bool] | None = None,
    checker: Checker | None = None,
    command: str = "prmsearch export",
) -> ExportReport:
    """Build the rows and write them, with the card, into ``out``.

    Raises ``ValueError`` (listing what went wrong) when no input could be read at all.
    """
    report = build_rows(sources, config, keep=keep, equivalent=equivalent, checker=checker)
    if not report.problems_read:
        reasons = "; ".join(str(e) for e in report.errors[:5]) or "no inputs"
        raise ValueError(f"nothing to export: {reasons}")
    files = write_rows(report.rows, out, formats)
    write_card(_card(report, config, sources, command, files), out)
    return report
