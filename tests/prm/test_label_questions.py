"""scripts/label_questions.py: a label folder without its questions (for results/), and back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from prmsearch.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import label_questions


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "labels.jsonl").read_text().splitlines()]


def test_strip_then_restore_gives_the_run_back_and_it_resumes(tmp_path, capsys):
    run = tmp_path / "run"
    base = ["label", "--split", "validation", "--limit", "3", "--samples", "2", "--rollouts", "1",
            "--max-solution-tokens", "48", "--threads", "1", "--no-progress", "--out"]
    assert main([*base, str(run)]) == 0
    stripped, restored = tmp_path / "stripped", tmp_path / "restored"
    assert label_questions.main(["strip", str(run), str(stripped)]) == 0
    assert all(row["prompt"] is None for row in _rows(stripped))
    assert label_questions.main(["restore", str(stripped), str(restored), "--dataset", "arith",
                                 "--split", "validation"]) == 0
    assert _rows(restored) == _rows(run)
    capsys.readouterr()
    assert main([*base, str(restored), "--resume", "--limit", "4"]) == 0  # the restored run goes on
    assert len(_rows(restored)) == 8


def test_restore_refuses_a_question_that_changed(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["label", "--split", "validation", "--limit", "2", "--samples", "1", "--rollouts", "1",
                 "--max-solution-tokens", "48", "--threads", "1", "--no-progress", "--out", str(run)]) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    first = next(iter(manifest["problems"]))
    manifest["problems"][first] = "0" * 16
    (run / "manifest.json").write_text(json.dumps(manifest))
    stripped = tmp_path / "stripped"
    label_questions.main(["strip", str(run), str(stripped)])
    try:
        label_questions.main(["restore", str(stripped), str(tmp_path / "r"), "--dataset", "arith",
                              "--split", "validation"])
    except SystemExit as exc:
        assert "differs from the one labelled" in str(exc)
    else:
        raise AssertionError("restore accepted a changed question")
