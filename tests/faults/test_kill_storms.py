"""The fault campaign, kill storms: ``bench`` and ``label`` killed with SIGKILL at random moments,
many times in a row, then resumed to the end. Every key has exactly one row, and the rows equal an
uninterrupted run's, wall time aside.

``PRMSEARCH_KILL_STORM`` sets the kills per storm (default 6 here; the issue's storm is 20:
``PRMSEARCH_KILL_STORM=20 pytest tests/faults/test_kill_storms.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

KILLS = int(os.environ.get("PRMSEARCH_KILL_STORM", "6"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _dataset(path: Path, count: int) -> Path:
    rows = [{"id": f"q{i}", "question": f"Start with {i}. Add 3. What is the result?", "answer": str(i + 3)}
            for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _timeless(value):
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items()
                if not any(t in k for t in ("wall", "seconds", "time", "set_aside"))}
    return value


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _storm(command: list[str], rows: Path, seed: int) -> int:
    """Start ``command`` (with --resume after the first start) and SIGKILL it at a random moment,
    ``KILLS`` times; then let it finish. Returns how many kills landed mid-run."""
    rng = random.Random(seed)
    landed = 0
    for attempt in range(KILLS):
        args = command + (["--resume"] if attempt or rows.exists() else [])
        run = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
        time.sleep(rng.uniform(1.0, 6.0))  # anywhere from model loading to mid-chunk
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            landed += 1
        run.wait()
    subprocess.run([*command, "--resume"] if rows.exists() else command, env=ENV, check=True,
                   capture_output=True, timeout=900)
    return landed


def test_bench_survives_a_kill_storm(tmp_path):
    data = _dataset(tmp_path / "data.jsonl", 24)
    bench = [sys.executable, "-m", "prmsearch.cli", "bench", "--dataset", str(data), "--id-field", "id",
             "--strategies", "greedy,beam", "--budgets", "1,4", "--threads", "1", "--chunk", "2",
             "--no-progress"]
    clean, stormed = tmp_path / "clean", tmp_path / "stormed"
    subprocess.run([*bench, "--out", str(clean)], env=ENV, check=True, capture_output=True, timeout=900)
    landed = _storm([*bench, "--out", str(stormed)], stormed / "results.jsonl", seed=1)
    assert landed >= 1
    rows = _rows(stormed / "results.jsonl")
    keys = [(r["qid"], r["strategy"], r["budget"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 24 * 3  # greedy at 1, beam at 1 and 4: each key once

    def by_key(rs):
        return sorted((_timeless(r) for r in rs), key=lambda r: (r["qid"], r["strategy"], r["budget"]))

    assert by_key(rows) == by_key(_rows(clean / "results.jsonl"))


def test_label_survives_a_kill_storm(tmp_path):
    label = [sys.executable, "-m", "prmsearch.cli", "label", "--split", "validation", "--limit", "16",
             "--samples", "2", "--rollouts", "2", "--max-solution-tokens", "64", "--chunk", "2",
             "--threads", "1", "--no-progress"]
    clean, stormed = tmp_path / "clean", tmp_path / "stormed"
    subprocess.run([*label, "--out", str(clean)], env=ENV, check=True, capture_output=True, timeout=900)
    landed = _storm([*label, "--out", str(stormed)], stormed / "labels.jsonl", seed=2)
    assert landed >= 1
    rows = _rows(stormed / "labels.jsonl")
    assert len(rows) == len({r["id"] for r in rows}) == 32
    assert sorted(map(json.dumps, rows)) == sorted(map(json.dumps, _rows(clean / "labels.jsonl")))
    assert (stormed / "stepwise.jsonl").read_text() != "" and \
        sorted((stormed / "stepwise.jsonl").read_text().splitlines()) == \
        sorted((clean / "stepwise.jsonl").read_text().splitlines())
