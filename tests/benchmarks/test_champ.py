"""CHAMP first-wrong-step annotations converted into ProcessBench rows."""

from __future__ import annotations

import collections
import json
import sys

import pytest

from prmsearch import cli
from prmsearch.benchmarks.prm_eval import champ
from prmsearch.benchmarks.prm_eval.champ import (
    ChampUnavailableError,
    load_champ_processbench,
    paragraph_spans,
    step_index,
)
from prmsearch.registry import Entry
from prmsearch.scorers.base import SCORERS
from prmsearch.scorers.scripted import ScriptedScorer


def test_paragraph_spans_split_at_blank_lines():
    text = "  First step.\n\nSecond\nstill second.\n \t\nThird.\n\n\n"
    spans = paragraph_spans(text)
    assert [text[a:b] for a, b in spans] == ["First step.", "Second\nstill second.", "Third."]
    assert step_index(spans, text.index("still")) == 1
    assert step_index(spans, text.index("\n \t\n") + 1) == 2  # a blank between steps: the next one
    assert step_index(spans, len(text) - 1) == 2  # trailing blanks: the last step
    assert paragraph_spans(" \n\n ") == []


def test_missing_package_is_a_clear_error(monkeypatch):
    champ._converted.cache_clear()
    monkeypatch.setitem(sys.modules, "champ_dataset", None)
    try:
        with pytest.raises(ChampUnavailableError, match="pip install champ-dataset"):
            load_champ_processbench()
    finally:
        champ._converted.cache_clear()


@pytest.fixture(scope="module")
def rows():
    pytest.importorskip("champ_dataset")
    return load_champ_processbench()


def test_row_count_and_labels(rows):
    assert len(rows) == 540
    labels = collections.Counter(r["label"] == -1 for r in rows)
    assert labels[False] == 444 and labels[True] == 96
    assert len({r["id"] for r in rows}) == 540
    for row in rows:
        assert -1 <= row["label"] < len(row["steps"])
        assert all(step.strip() == step and step for step in row["steps"])
    assert {r["model"] for r in rows} == {"GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"}


def test_spot_check_first_wrong_step(rows):
    (row,) = [r for r in rows if r["id"] == "P_Combinatorics_1|GPT-3.5|No C w/o H"]
    assert row["problem"].startswith("Let a string consist of digit 1, 2, 3.")
    assert row["label"] == 4
    assert row["steps"][row["label"]].startswith("If the last digit is 1, then the second-to-last digit")
    assert row["steps"][3].startswith("For n > 1")


def test_rows_are_fresh_copies(rows):
    again = load_champ_processbench()
    again[0]["steps"].append("x")
    assert load_champ_processbench()[0]["steps"] == rows[0]["steps"]


def test_cli_eval_prm_on_champ(rows, monkeypatch, capsys):
    never_flags = Entry("test-high", lambda: ScriptedScorer({}, default=0.9))
    monkeypatch.setitem(SCORERS._entries, "test-high", never_flags)
    args = ["eval-prm", "--dataset", "champ", "--split-field", "model", "--prm", "test-high", "--json"]
    assert cli.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    # a PRM that never flags a step is right on every correct solution and on no erroneous one
    assert report["overall"]["n"] == 540
    assert report["overall"]["accuracy_correct"] == 1.0 and report["overall"]["accuracy_erroneous"] == 0.0
    splits = sorted(s["split"] for s in report["splits"])
    assert splits == ["GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"]
