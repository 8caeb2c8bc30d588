"""PRM labels from the checker, MC rollouts through the engine, and consensus (scripted policy)."""

from __future__ import annotations

import pytest

from prmsearch.arith.problems import load_split
from prmsearch.policies.scripted import ScriptedPolicy
from training.arith.evaluate import first_error_report, predicted_first_error
from training.arith.labels import LabelSource, RolloutConfig, checker_labels, label_solutions

PROBLEM = load_split("test", 1)[0]  # 12 * 2 = 24 | 24 - 5 = 19 | 19 + 13 = 32 (boxed)
GOLD = PROBLEM.gold_steps
WRONG_2 = "24 - 5 = 18"


def script(question, steps, index, seed):
    """Sample index 1 errs at step 2 (and cannot recover), index 3 errs at step 3."""
    depth = len(steps)
    if WRONG_2 in steps:
        return "18 + 13 = 31. The answer is \\boxed{31}"
    if depth == 1 and index == 1:
        return WRONG_2
    if depth == 2 and index == 3:
        return "19 + 13 = 33. The answer is \\boxed{33}"
    return GOLD[depth]


def test_checker_labels_mark_the_first_error_and_everything_after():
    assert checker_labels(PROBLEM, GOLD) == (-1, True, (1.0, 1.0, 1.0))
    first, correct, labels = checker_labels(PROBLEM, (GOLD[0], WRONG_2, "18 + 13 = 31. \\boxed{31}"))
    assert (first, correct, labels) == (1, False, (1.0, 0.0, 0.0))


def test_labels_from_every_source():
    solutions = label_solutions(ScriptedPolicy(script), [PROBLEM], RolloutConfig(samples=3, rollouts=4))
    assert len(solutions) == 3
    good, bad = solutions[0], solutions[1]
    assert good.steps == GOLD and bad.steps[1] == WRONG_2
    assert good.labels("checker") == [1.0, 1.0, 1.0]
    assert bad.labels(LabelSource.CHECKER) == [1.0, 0.0, 0.0]
    # MC from prefix [gold1]: rollouts 1 and 3 go wrong, 0 and 2 right, plus the sample's own
    # (right) continuation -> 3 of 5; from [gold1, gold2] only rollout 3 goes wrong -> 4 of 5
    assert good.mc_soft[0] == pytest.approx(3 / 5)
    assert good.mc_soft[1] == pytest.approx(4 / 5) and good.mc_soft[2] == 1.0
    assert bad.mc_soft[1:] == (0.0, 0.0)
    assert bad.labels("mc") == [1.0, 0.0, 0.0]
    assert bad.labels("consensus") == [1.0, 0.0, 0.0]


def test_consensus_masks_disagreements():
    solutions = label_solutions(ScriptedPolicy(script), [PROBLEM], RolloutConfig(samples=1, rollouts=2))
    sol = solutions[0]
    object.__setattr__(sol, "mc_soft", (0.0, 1.0, 1.0))
    assert sol.labels("consensus") == [None, 1.0, 1.0]


def test_first_error_f1():
    assert predicted_first_error([0.9, 0.4, 0.8], 0.5) == 1
    assert predicted_first_error([0.9, 0.6], 0.5) == -1
    report = first_error_report([1, -1, 0, -1], [[0.9, 0.2], [0.9, 0.9], [0.8, 0.1], [0.3, 0.9]])
    assert report.accuracy_erroneous == 0.5 and report.accuracy_correct == 0.5
    assert report.f1 == pytest.approx(0.5)


@pytest.mark.slow
def test_prm_pipeline_smoke_run(tmp_path):
    """The exact retraining command of the shipped PRM, at seconds-long sizes (keeps it working)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "prm"
    subprocess.run(
        [sys.executable, "-m", "training.train_arith_prm", "--out", str(out), "--smoke"],
        cwd=Path(__file__).resolve().parents[2], check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads((out / "report.json").read_text())
    assert set(report["prms"]) == {"checker+synthetic", "checker", "mc", "consensus"}
    assert report["references"]["exact checker (oracle)"]["f1"] == 1.0
    assert (out / "prm-checker" / "model.safetensors").exists()
    # chosen on validation; the test split is read once, for the chosen PRM (and references)
    from training.arith.pipeline import best_source

    assert report["chosen"] == best_source(report) in report["prms"]
    assert set(report["test"]) == {f"PRM: {report['chosen']}", "policy-confidence (no PRM)",
                                   "exact checker (oracle)"}
    assert report["config"]["validation_problems"] == 4
