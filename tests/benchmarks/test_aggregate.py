"""Offline re-aggregation (`prmsearch aggregate`): hand-computed accuracies, seeding, PRM scoring, CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from prmsearch import cli
from prmsearch.answers import AnswerMatcher
from prmsearch.benchmarks.analysis.aggregate import (
    ORACLE,
    AggregateConfig,
    aggregate,
    default_ns,
    load_aggregate_rows,
    parse_aggregate_row,
    prepare_question,
    run_aggregate,
    score_missing,
    select_response,
    split_steps,
)
from prmsearch.benchmarks.analysis.score_journal import ScoreJournal
from prmsearch.benchmarks.datasets import DatasetFormatError
from prmsearch.registry import Entry
from prmsearch.scorers.base import SCORERS
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.aggregation import Aggregation
from prmsearch.search.selection import Selection

# Gold 4. Responses 0 and 3 say 4 ("4.0" votes with "4"), 1, 2 and 4 say 5, response 5 has no answer.
#            min   last  prod   mean
#   r0  4    .8    .8    .72    .85
#   r1  5    .6    .7    .42    .65
#   r2  5    .3    .95   .285   .625
#   r3  4    .5    .5    .5     .5      (one float: every aggregation is .5)
#   r4  5    .1    .1    .01    .1
#   r5  -    .99   .99   .99    .99     (no answer: argmax skips it, votes ignore it)
# argmax:   min r0 ok, last r2 wrong, prod r0 ok, mean r0 ok
# majority: 5 has 3 votes, 4 has 2: wrong under every aggregation
# weighted: min 4=1.3 vs 5=1.0 ok; last 1.3 vs 1.75 wrong; prod 1.22 vs .715 ok; mean 1.35 vs 1.375 wrong
HAND_ROW = {
    "question": "What is 2+2?",
    "answer": "4",
    "responses": [
        "Add them.\n\nSo \\boxed{4}",
        "Guess.\n\n\\boxed{5}",
        "Hmm.\n\n\\boxed{5}",
        "The answer is \\boxed{4.0}",
        "No.\n\n\\boxed{5}",
        "I give up.",
    ],
    "scores": [[0.9, 0.8], [0.6, 0.7], [0.3, 0.95], 0.5, [0.1, 0.1], [0.99]],
}
EXPECTED = {
    ("argmax", "min"): 1.0, ("argmax", "last"): 0.0, ("argmax", "prod"): 1.0, ("argmax", "mean"): 1.0,
    ("majority", "min"): 0.0, ("majority", "last"): 0.0, ("majority", "prod"): 0.0, ("majority", "mean"): 0.0,
    ("weighted", "min"): 1.0, ("weighted", "last"): 0.0, ("weighted", "prod"): 1.0, ("weighted", "mean"): 0.0,
}  # fmt: skip

FLOAT_ROW = {
    "question": "q2",
    "answer": 7,
    "responses": ["\\boxed{7}", "\\boxed{8}", "\\boxed{8}"],
    "scores": [0.9, 0.4, 0.3],
}


def _row(obj, index=0):
    return parse_aggregate_row(obj, index=index, line=index + 1, source="test")


def _cells(report):
    return {(r["selection"], r["aggregation"], r["n"]): r["accuracy"] for r in report["results"]}


def test_hand_computed_accuracies_at_full_n():
    report = aggregate([_row(HAND_ROW)], AggregateConfig(ns=(6,)))
    cells = _cells(report)
    for (selection, aggregation), expected in EXPECTED.items():
        assert cells[(selection, aggregation, 6)] == expected, (selection, aggregation)
    assert cells[(ORACLE, None, 6)] == 1.0


def test_float_scores_mean_every_aggregation_is_that_float():
    report = aggregate([_row(FLOAT_ROW)], AggregateConfig(ns=(3,)))
    cells = _cells(report)
    for aggregation in ("min", "last", "prod", "mean"):
        assert cells[("argmax", aggregation, 3)] == 1.0
        assert cells[("majority", aggregation, 3)] == 0.0  # 8 has two votes
        assert cells[("weighted", aggregation, 3)] == 1.0  # 7 weighs .9 against .7


def test_answer_groups_use_canonical_forms_and_are_graded_per_answer():
    prepared = prepare_question(_row(HAND_ROW), tuple(Aggregation), AnswerMatcher())
    assert prepared.groups.tolist() == [0, 1, 1, 0, 1, -1]
    assert prepared.correct.tolist() == [True, False, False, True, False, False]
    assert prepared.scores.shape == (4, 6)
    assert prepared.scores[0, 3] == prepared.scores[2, 3] == 0.5


def test_selection_on_a_subset():
    prepared = prepare_question(_row(HAND_ROW), tuple(Aggregation), AnswerMatcher())
    subset = np.array([1, 3, 5])
    assert select_response(prepared, subset, Selection.ARGMAX, 0) == 1  # .6 beats .5; r5 is unanswered
    # one vote each for 5 and 4: the tie goes to the heavier group (min: .6 vs .5)
    assert select_response(prepared, subset, Selection.MAJORITY, 0) == 1
    assert select_response(prepared, np.array([5]), Selection.WEIGHTED, 0) == 5  # nothing answered


def test_n_one_makes_every_method_agree_with_the_oracle():
    rows = [_row(HAND_ROW, 0), _row(FLOAT_ROW, 1)]
    report = aggregate(rows, AggregateConfig(subsamples=8, seed=3))
    assert report["ns"] == [1, 2, 3]
    cells = _cells(report)
    oracle = cells[(ORACLE, None, 1)]
    assert all(value == oracle for (s, a, n), value in cells.items() if n == 1)
    for r in report["results"]:
        lo, hi = r["ci95"]
        assert lo <= r["accuracy"] <= hi


def test_subsampling_is_seeded_and_deterministic():
    rows = [_row(HAND_ROW, 0), _row(FLOAT_ROW, 1)]
    config = AggregateConfig(subsamples=4, seed=11)
    assert aggregate(rows, config) == aggregate(rows, config)
    # a question's draws depend on its own index only, not on the other rows
    config = AggregateConfig(ns=(2,), subsamples=4, seed=11)
    first, second = (_cells(aggregate([row], config)) for row in rows)
    both = _cells(aggregate(rows, config))
    for key, value in both.items():
        assert value == pytest.approx((first[key] + second[key]) / 2)
    other_seed = aggregate(rows, AggregateConfig(subsamples=4, seed=12))
    assert other_seed["seed"] == 12


def test_default_ns():
    assert default_ns(1) == (1,)
    assert default_ns(8) == (1, 2, 4, 8)
    assert default_ns(12) == (1, 2, 4, 8, 12)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="selections"):
        AggregateConfig(selections=("best",))
    with pytest.raises(ValueError, match="subsamples"):
        AggregateConfig(subsamples=0)
    with pytest.raises(ValueError, match="exceeds"):
        aggregate([_row(FLOAT_ROW)], AggregateConfig(ns=(4,)))


def test_malformed_rows_name_line_and_field(tmp_path):
    path = tmp_path / "rows.jsonl"
    good = json.dumps(FLOAT_ROW)
    bad = json.dumps({**FLOAT_ROW, "scores": [0.1, 0.2]})
    path.write_text(f"{good}\n{bad}\nnot json\n")
    with pytest.raises(DatasetFormatError, match=r"rows.jsonl:2: field 'scores'"):
        load_aggregate_rows(path)
    rows, errors = load_aggregate_rows(path, skip_bad_rows=True)
    assert len(rows) == 1
    assert sorted(e.line for e in errors) == [2, 3]
    with pytest.raises(DatasetFormatError, match="responses"):
        _row({"question": "q", "answer": "1", "responses": "text"})


def test_prm_scores_rows_without_scores_in_batches():
    row = {k: v for k, v in HAND_ROW.items() if k != "scores"}
    scorer = ScriptedScorer({"So \\boxed{4}": 0.9, "\\boxed{5}": 0.2}, default=0.6)
    config = AggregateConfig(ns=(6,), batch_size=4)
    report, scored = run_aggregate([_row(row)], config, scorer=scorer)
    assert scorer.calls == [4, 2]
    assert report["scored_by_prm"] == 1
    assert scored[0].scores[0] == (0.6, 0.9)
    assert scored[0].scores[3] == (0.6,)  # "The answer is \boxed{4.0}" is one step with the default
    cells = _cells(report)
    assert cells[("argmax", "last", 6)] == 1.0  # .9 beats the 5s' .2 (r5 unanswered)
    with pytest.raises(ValueError, match="--prm"):
        run_aggregate([_row(row)], config)


def test_split_steps_drops_blank_parts():
    assert split_steps("a\n\n\n\nb\n\n ", "\n\n") == ("a", "b")


@pytest.fixture
def main(monkeypatch):
    return cli.main


def test_cli_aggregate_json_and_out(main, tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(HAND_ROW) + "\n")
    out = tmp_path / "report"
    assert main(["aggregate", str(path), "--ns", "6", "--json", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert _cells(report)[("weighted", "min", 6)] == 1.0
    assert (out / "aggregate.json").is_file()
    assert "| weighted | min |" in (out / "aggregate.md").read_text()


def test_cli_aggregate_scores_with_a_named_prm(main, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(
        SCORERS._entries, "test-const", Entry("test-const", lambda: ScriptedScorer({}, default=0.7))
    )
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({k: v for k, v in HAND_ROW.items() if k != "scores"}) + "\n")
    scored = tmp_path / "scored.jsonl"
    args = ["aggregate", str(path), "--prm", "test-const", "--write-scores", str(scored)]
    assert main(args) == 0
    assert "| argmax | min |" in capsys.readouterr().out
    assert json.loads(scored.read_text())["scores"][0] == [0.7, 0.7]


def test_cli_aggregate_bad_input_exits_2(main, tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"question": "q", "responses": ["x"]}) + "\n")
    assert main(["aggregate", str(path)]) == 2
    assert "rows.jsonl:1: field 'answer'" in capsys.readouterr().err
    assert main(["aggregate", str(tmp_path / "missing.jsonl")]) == 2


def test_cli_rescore_replaces_the_rows_own_scores(main, tmp_path, capsys, monkeypatch):
    """--rescore: the same samples picked by another scorer (the rows' scores are ignored)."""
    monkeypatch.setitem(
        SCORERS._entries, "test-const", Entry("test-const", lambda: ScriptedScorer({}, default=0.7))
    )
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(HAND_ROW) + "\n")
    scored = tmp_path / "scored.jsonl"
    assert main(["aggregate", str(path), "--ns", "6", "--rescore", "--prm", "test-const",
                 "--write-scores", str(scored), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert json.loads(scored.read_text())["scores"][0] == [0.7, 0.7]  # not the row's [0.9, 0.8]
    # every response scores 0.7: argmax takes the first answered one (right), weighted = majority (wrong)
    assert _cells(report)[("weighted", "min", 6)] == 0.0
    assert main(["aggregate", str(path), "--rescore"]) == 2
    assert "--rescore: needs --prm" in capsys.readouterr().err


class _Killed(Exception):
    """Stands in for the run being killed between two scorer calls."""


class _DiesAfter(ScriptedScorer):
    def __init__(self, calls_before_death: int, **kwargs):
        super().__init__({"So \\boxed{4}": 0.9, "\\boxed{5}": 0.2}, default=0.6, **kwargs)
        self.left = calls_before_death

    def score(self, requests):
        if self.left == 0:
            raise _Killed
        self.left -= 1
        return super().score(requests)


def _unscored_rows():
    row = {k: v for k, v in HAND_ROW.items() if k != "scores"}
    other = {**row, "question": "What is 2+3?", "answer": "5"}
    return [_row(row), parse_aggregate_row(other, index=1, line=2, source="test")]


def test_a_killed_scoring_run_resumes_from_its_journal(tmp_path):
    """Scores reach the journal batch by batch; the rerun scores only what is missing and
    ends with the same rows as one uninterrupted run."""
    config = AggregateConfig(ns=(6,), batch_size=4)
    identity = {"prm": "scripted", "delimiter": config.delimiter}
    path = tmp_path / "scores.journal.jsonl"
    journal = ScoreJournal(path, identity)
    with pytest.raises(_Killed):
        score_missing(_DiesAfter(1), _unscored_rows(), config, journal)
    journal.close()
    assert len(path.read_text().splitlines()) == 1 + 4  # header and the first batch
    with path.open("a") as handle:
        handle.write('{"row": 1, "resp')  # torn by the kill
    resumed = ScoreJournal(path, identity)
    assert resumed.resumed == 4
    rescorer = _DiesAfter(10)
    rows, errors = score_missing(rescorer, _unscored_rows(), config, resumed)
    resumed.close()
    assert rescorer.calls == [4, 4] and not errors  # 12 responses, 4 already scored
    whole, _ = score_missing(_DiesAfter(10), _unscored_rows(), config)
    assert [r.scores for r in rows] == [r.scores for r in whole]
    again = ScoreJournal(path, identity)
    assert again.resumed == 12  # the torn line was cut off, every later entry reads back
    nothing = _DiesAfter(0)
    assert [r.scores for r in score_missing(nothing, _unscored_rows(), config, again)[0]] == [
        r.scores for r in whole
    ]


def test_a_journal_never_fills_in_other_text_or_another_scorer(tmp_path):
    config = AggregateConfig(ns=(6,), batch_size=64)
    identity = {"prm": "scripted", "delimiter": config.delimiter}
    path = tmp_path / "j.jsonl"
    journal = ScoreJournal(path, identity)
    score_missing(_DiesAfter(5), _unscored_rows(), config, journal)
    journal.close()
    edited = _unscored_rows()
    first_changed = ("Add them.\n\n\\boxed{5}", *edited[0].responses[1:])
    edited[0] = dataclasses.replace(edited[0], responses=first_changed)
    scorer = _DiesAfter(5)
    rows, _ = score_missing(scorer, edited, config, ScoreJournal(path, identity))
    assert scorer.calls == [1]  # only the edited response
    assert rows[0].scores[0] == (0.6, 0.2)
    with pytest.raises(ValueError, match="another scorer"):
        ScoreJournal(path, {**identity, "prm": "other"})
    junk = tmp_path / "junk.jsonl"
    junk.write_text("hello\n")
    with pytest.raises(ValueError, match="not a prmsearch scoring journal"):
        ScoreJournal(junk, identity)


def test_cli_aggregate_resumes_from_the_journal_in_out(main, tmp_path, capsys, monkeypatch):
    made = []

    def build():
        made.append(ScriptedScorer({}, default=0.7))
        return made[-1]

    monkeypatch.setitem(SCORERS._entries, "test-const", Entry("test-const", build))
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(HAND_ROW) + "\n")
    out = tmp_path / "report"
    args = ["aggregate", str(path), "--ns", "6", "--rescore", "--prm", "test-const", "--out", str(out)]
    args.append("--json")
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert (out / "scores.journal.jsonl").is_file() and made[-1].calls == [6]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "resuming: 6 responses already scored" in captured.err
    assert made[-1].calls == []  # nothing left to score
    second = json.loads(captured.out)
    assert second["results"] == first["results"]
    assert second["journal"]["resumed_responses"] == 6
