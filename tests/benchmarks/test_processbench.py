"""PRM step-level evaluation (`prmsearch eval-prm`): the ProcessBench metric, tuning, splits, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prmsearch import cli
from prmsearch.benchmarks.datasets import DatasetFormatError
from prmsearch.benchmarks.prm_eval.processbench import (
    EvalPrmConfig,
    ProcessBenchRow,
    evaluate,
    first_error_report,
    load_rows,
    markdown_report,
    predicted_first_error,
    predictions_for_grid,
    run_eval_prm,
    score_rows,
    threshold_grid,
    tune_threshold,
)
from prmsearch.registry import Entry
from prmsearch.scorers.base import SCORERS
from prmsearch.scorers.scripted import ScriptedScorer

# Four solutions whose perfect thresholds are exactly (0.65, 0.72]:
#   A label 1: flagged at step 1 for t in (0.3, 0.9]
#   B label -1: nothing flagged for t <= 0.75
#   C label 0: flagged at step 0 for t > 0.65
#   D label -1: nothing flagged for t <= 0.72
LABELS = [1, -1, 0, -1]
SCORES = [[0.9, 0.3, 0.8], [0.8, 0.75], [0.65, 0.9], [0.9, 0.72]]


def test_prediction_is_the_first_step_below_the_threshold():
    assert predicted_first_error([0.9, 0.4, 0.2], 0.5) == 1
    assert predicted_first_error([0.9, 0.5], 0.5) == -1  # strictly below
    assert predicted_first_error([], 0.5) == -1


def test_hand_computed_report():
    report = first_error_report(LABELS, SCORES, 0.5)
    # A found (0.3 < .5); C missed (0.65 >= .5); B and D clean
    assert (report.n_erroneous, report.n_correct) == (2, 2)
    assert report.accuracy_erroneous == 0.5
    assert report.accuracy_correct == 1.0
    assert report.f1 == pytest.approx(2 / 3)
    assert first_error_report([0], [[0.9]], 0.5).f1 == 0.0  # no correct rows: F1 0


def test_threshold_tuning_finds_the_perfect_window_nearest_half():
    best = tune_threshold(LABELS, SCORES)
    assert best.threshold == pytest.approx(0.66)
    assert best.f1 == 1.0
    coarse = tune_threshold(LABELS, SCORES, threshold_grid(0.1))
    assert coarse.threshold == pytest.approx(0.7)
    with pytest.raises(ValueError, match="erroneous and correct"):
        tune_threshold([0, 1], [[0.1], [0.9, 0.1]])


def test_threshold_grid():
    grid = threshold_grid(0.25)
    assert grid.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert threshold_grid(0.3).tolist()[-1] == 1.0
    with pytest.raises(ValueError, match="grid step"):
        threshold_grid(0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), max_size=8))
def test_grid_predictions_match_the_plain_loop(scores):
    grid = threshold_grid(0.05)
    fast = predictions_for_grid(scores, grid)
    assert fast.tolist() == [predicted_first_error(scores, t) for t in grid]


def _rows(split="s"):
    return [
        ProcessBenchRow(f"r{i}", f"problem {i}", tuple(f"step {i}.{k}" for k in range(len(s))), label, split)
        for i, (label, s) in enumerate(zip(LABELS, SCORES, strict=True))
    ]


def _write_jsonl(path, rows):
    records = [{"id": r.id, "problem": r.problem, "steps": list(r.steps), "label": r.label} for r in rows]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def _lookup_scorer(scores_by_problem):
    def fn(question, steps):
        return scores_by_problem[question][len(steps) - 1]

    return ScriptedScorer(fn)


def test_scoring_is_batched_and_a_misaligned_row_is_recorded():
    rows = _rows()
    by_problem = {row.problem: s for row, s in zip(rows, SCORES, strict=True)}
    scorer = _lookup_scorer(by_problem)
    scores, errors = score_rows(scorer, rows, batch_size=3)
    assert scores == SCORES and not errors
    assert scorer.calls == [3, 1]

    class Misaligned(ScriptedScorer):
        def score(self, requests):
            out = super().score(requests)
            return [o if r.question != "problem 2" else type(o)(o.scores[:1]) for r, o in zip(requests, out)]

    scores, errors = score_rows(Misaligned(lambda q, s: by_problem[q][len(s) - 1]), rows, batch_size=4)
    assert scores[2] is None and scores[0] == SCORES[0]
    assert len(errors) == 1 and "r2" in str(errors[0])


def test_per_split_reports_and_tuning_on_one_split(tmp_path):
    dev, test = tmp_path / "dev.jsonl", tmp_path / "test.jsonl"
    _write_jsonl(dev, _rows())
    _write_jsonl(test, _rows()[:2])
    rows, errors = load_rows([dev, test])
    assert [r.split for r in rows] == ["dev"] * 4 + ["test"] * 2 and not errors
    scores = SCORES + SCORES[:2]
    fixed = evaluate(rows, scores, EvalPrmConfig())
    assert fixed["threshold"] == 0.5 and fixed["tuned_on"] is None
    assert [s["split"] for s in fixed["splits"]] == ["dev", "test"]
    assert fixed["splits"][0]["f1"] == pytest.approx(2 / 3)
    assert fixed["overall"]["n"] == 6
    tuned = evaluate(rows, scores, EvalPrmConfig(tune_on="dev"))
    assert tuned["threshold"] == pytest.approx(0.66)
    assert tuned["tuned_on"]["split"] == "dev"
    assert tuned["splits"][1]["accuracy_erroneous"] == 1.0
    assert tuned["mean_f1"] == pytest.approx(np.mean([s["f1"] for s in tuned["splits"]]))
    with pytest.raises(ValueError, match="not among the splits: dev, test"):
        evaluate(rows, scores, EvalPrmConfig(tune_on="train"))
    assert "| dev | 4 | 2 | 2 |" in markdown_report(fixed)


def test_split_field_and_row_errors(tmp_path):
    path = tmp_path / "pb.jsonl"
    lines = [
        {"problem": "p", "steps": ["a", "b"], "label": 1, "source": "gsm8k"},
        {"problem": "p", "steps": ["a", "  "], "label": -1, "source": "math"},  # empty step
        {"problem": "p", "steps": ["a"], "label": -1, "source": "math"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows, errors = load_rows([path], split_field="source")
    assert [r.split for r in rows] == ["gsm8k", "math"]
    assert rows[0].id == f"{path}:1"
    assert len(errors) == 1 and errors[0].line == 2 and "step 1 is empty" in str(errors[0])
    path.write_text(json.dumps({"problem": "p", "steps": ["a"], "label": 3}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"pb.jsonl:1: field 'label'"):
        load_rows([path])
    rows, errors = load_rows([path], skip_bad_rows=True)
    assert not rows and len(errors) == 1


def test_config_validation():
    with pytest.raises(ValueError, match="not both"):
        EvalPrmConfig(threshold=0.4, tune_on="dev")
    with pytest.raises(ValueError, match="threshold must be in"):
        EvalPrmConfig(threshold=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        EvalPrmConfig(batch_size=0)


def test_run_eval_prm_reports_errors_and_counts():
    rows = _rows()
    scorer = _lookup_scorer({row.problem: s for row, s in zip(rows, SCORES, strict=True)})
    report, scores = run_eval_prm(scorer, rows, EvalPrmConfig(threshold=0.7))
    assert scores == SCORES
    assert report["n_scored"] == 4 and report["errors"] == []
    assert report["overall"]["f1"] == 1.0


@pytest.fixture
def main(monkeypatch):
    by_problem = {f"problem {i}": s for i, s in enumerate(SCORES)}
    monkeypatch.setitem(
        SCORERS._entries, "test-lookup", Entry("test-lookup", lambda: _lookup_scorer(by_problem))
    )
    return cli.main


def test_cli_eval_prm_tunes_and_writes(main, tmp_path, capsys):
    path = tmp_path / "dev.jsonl"
    _write_jsonl(path, _rows())
    out, saved = tmp_path / "out", tmp_path / "scores.jsonl"
    args = ["eval-prm", str(path), "--prm", "test-lookup", "--tune-on", "dev", "--json"]
    assert main([*args, "--out", str(out), "--save-scores", str(saved)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["threshold"] == pytest.approx(0.66) and report["overall"]["f1"] == 1.0
    assert (out / "eval_prm.json").is_file() and (out / "eval_prm.md").is_file()
    first = json.loads(saved.read_text().splitlines()[0])
    assert first["scores"] == SCORES[0] and first["predicted"] == 1


def test_cli_eval_prm_bad_input_exits_2(main, tmp_path, capsys):
    assert main(["eval-prm", "--prm", "test-lookup"]) == 2
    assert "at least one input file" in capsys.readouterr().err
    assert main(["eval-prm", "--dataset", "nope", "--prm", "test-lookup"]) == 2
    assert "known: champ" in capsys.readouterr().err
    path = tmp_path / "x.jsonl"
    path.write_text('{"problem": "p", "steps": "a", "label": 0}\n')
    assert main(["eval-prm", str(path), "--prm", "test-lookup"]) == 2
    assert "x.jsonl:1: field 'steps'" in capsys.readouterr().err
    assert main(["eval-prm", str(path), "--threshold", "0.3", "--tune-on", "x"]) == 2
