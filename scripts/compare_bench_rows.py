"""Compare two `prmsearch bench` results files row by row, wall times left out: the check that a
change to the driver left every search as it was (answers, steps, step scores, candidates and
ledgers).

    python scripts/compare_bench_rows.py RUNS/before/results.jsonl RUNS/after/results.jsonl

Prints the row counts and every differing field of the first differing rows; exits 1 when any row
differs or is missing on one side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: a row's identity: the same problem under the same strategy, budget and seed
KEY = ("strategy", "budget", "seed", "qid")


def without_times(value: Any) -> Any:
    """``value`` with every wall-clock field (``wall_s`` and the like) left out, recursively."""
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if not k.endswith("_s")}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


def load_rows(path: Path) -> dict[tuple[Any, ...], Any]:
    """The rows of a results file by their identity, wall times left out."""
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows[tuple(row.get(k) for k in KEY)] = without_times(row)
    return rows


def differences(before: dict, after: dict) -> list[str]:
    """One line per row missing on a side or differing, naming the differing fields."""
    lines = [f"{key}: only in the first file" for key in before if key not in after]
    lines += [f"{key}: only in the second file" for key in after if key not in before]
    for key in before.keys() & after.keys():
        a, b = before[key], after[key]
        if a != b:
            fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            lines.append(f"{key}: {', '.join(fields)} differ")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before, after = load_rows(args.before), load_rows(args.after)
    found = differences(before, after)
    print(f"{len(before)} rows against {len(after)}; {len(found)} differ or are missing")
    for line in found[:10]:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
