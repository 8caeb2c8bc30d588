"""Fixes carried as data (prmsearch.fixes): the library's spelling, the command line's, and text
from outside that holds braces."""

from __future__ import annotations

import pytest

from prmsearch.benchmarks.datasets import load_dataset
from prmsearch.cli.errors import cli_text
from prmsearch.fixes import Arg, fixed, literal, spelled


def test_a_fixed_error_reads_as_python_and_keeps_its_template():
    error = fixed(ValueError, f"bad {literal('{row}')}; pass {{}}", Arg("on_error", "'skip'"))
    assert str(error) == "bad {row}; pass on_error='skip'"
    assert spelled(error, lambda arg: f"--{arg.name}") == "bad {row}; pass --on_error"
    assert spelled(error, lambda arg: None) == str(error)  # None keeps the Python spelling
    assert spelled(ValueError("plain"), lambda arg: "x") is None


def test_a_bad_row_names_the_skip_flag_on_the_command_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "q {x}", "answer": "1"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        load_dataset("jsonl", path=str(path))
    assert f"{path}:2" in str(caught.value) and "on_error='skip'" in str(caught.value)
    line = cli_text(caught.value)
    assert f"{path}:2" in line and "--skip-bad-rows" in line and "on_error" not in line
