"""The BoN-bias measures of ``eval-prm --labels``, checked by hand on a small case, and end to end
on solutions labelled by ``prmsearch label``."""

from __future__ import annotations

import json

import pytest

from prmsearch.benchmarks.prm_eval.prm_bias import (
    LabelledCandidate,
    bias_markdown,
    bias_report,
    read_labelled,
)
from prmsearch.cli import main


def _c(problem, first_error, correct, steps):
    texts = tuple(f"s{i}" for i in range(steps))
    return LabelledCandidate(problem, f"question {problem}", texts, first_error, correct)


CANDIDATES = [
    _c("A", -1, True, 2),  # fully correct
    _c("A", 0, True, 2),  # right answer through a wrong step
    _c("B", 1, False, 3),
    _c("B", 1, True, 3),  # right answer through a wrong step
    _c("C", -1, True, 2),
    _c("C", 0, False, 2),
]
SCORES = [[0.9, 0.8], [0.95, 0.99], [0.9, 0.2, 0.1], [0.9, 0.3, 0.95], [0.7, 0.6], [0.2, 0.9]]


def test_bias_figures_by_hand():
    report = bias_report(CANDIDATES, SCORES, "min")
    assert report["response"] == {"best_of_n_accuracy": 1.0, "pass_at_n": 1.0}
    arws = report["right_answer_wrong_step"]
    assert arws["solutions"] == 2 and arws["problems_with_one"] == 2
    assert arws["ranked_first"] == 1.0  # both A and B rank theirs first
    assert arws["fully_correct_available"] == 0.5  # only A had a fully correct alternative
    low = report["min_on_last_step"]
    assert low["all"] == 0.5 and low["error_before_last"] == 0.25 and low["min_at_first_error"] == 0.75
    step = report["step"]
    assert step["accuracy_erroneous"] == 0.75 and step["accuracy_correct"] == 1.0
    assert "| right answer through a wrong step ranked first (2 problems) | 100.0% |" in bias_markdown(report)


def test_last_step_aggregation_changes_the_ranking():
    report = bias_report(CANDIDATES, SCORES, "last")
    # C: the wrong answer's last step (0.9) now beats the right one's (0.6)
    assert report["response"]["best_of_n_accuracy"] == pytest.approx(2 / 3)


def test_read_labelled_skips_unlabelled_rows(tmp_path):
    rows = [
        {"problem_id": "p", "prompt": "q", "completions": ["a", "b"], "labels": [True, False],
         "answer_correct": True, "status": "labelled"},
        {"problem_id": "p", "prompt": "q", "completions": ["a"], "labels": None, "answer_correct": False,
         "status": "unparsable"},
    ]  # fmt: skip
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (only,) = read_labelled(path)
    assert only.first_error == 1 and only.right_answer_wrong_step
    path.write_text(json.dumps({"question": "not ours"}) + "\n")
    with pytest.raises(ValueError, match=r"labels\.jsonl:1: not a labels\.jsonl row"):
        read_labelled(path)


def test_eval_prm_on_labels_end_to_end(tmp_path, capsys):
    labels = tmp_path / "labels"
    assert main(["label", "--split", "train", "--limit", "4", "--samples", "3", "--rollouts", "2",
                 "--max-solution-tokens", "96", "--out", str(labels), "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    for prm in ("arith", "arith-oracle"):
        out = tmp_path / prm
        args = ["eval-prm", "--labels", str(labels / "labels.jsonl"), "--prm", prm, "--json"]
        args += ["--out", str(out)]
        assert main(args) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["solutions"] == 12 and report["problems"] == 4 and report["prm"] == prm
        assert (out / "eval_prm_bias.md").read_text().startswith(f"{prm}: 12 solutions of 4 problems")
    assert main(["eval-prm", "--labels", str(labels / "labels.jsonl"), "extra.jsonl"]) == 2
    assert "not both" in capsys.readouterr().err
