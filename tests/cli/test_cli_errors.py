"""Bad command-line values: never a traceback, always one line on stderr that names the flag (and
the fix in flags, not Python arguments), exit status 2. Plus the dataset flags that such fixes
name: ``--dataset FILE.jsonl``, ``--skip-bad-rows``, ``--question-field``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import synthetic_backends

from prmsearch import register_policy, register_scorer
from prmsearch.cli import main

Q = "Start with 3. Add 4. What is the result?"

CASES = [
    (["solve", Q, "--policy", "/no/such/folder"], "--policy '/no/such/folder'"),
    (["solve", Q, "--policy", "hf"], "--policy-backend hf"),
    (["solve", Q, "--policy-backend", "nope", "--policy", "x"], "--policy-backend 'nope'"),
    (["solve", Q, "--policy-backend", "hf"], "--policy MODEL"),
    (["solve", Q, "--prm", "qwen-prm"], "--prm-family qwen-prm"),
    (["solve", Q, "--prm", "not-a-scorer"], "--prm-family FAMILY"),
    (["solve", Q, "--prm", "/no/such/prm", "--prm-family", "qwen-prm"], "--prm '/no/such/prm'"),
    (["solve", Q, "--prm", "x", "--prm-family", "nope"], "--prm-family 'nope'"),
    (["solve", Q, "--strategy", "beam", "--prm-backend", "vllm"], "needs --prm MODEL and --prm-family"),
    (["solve", Q, "--strategy", "beam", "--prm", "x", "--prm-family", "skywork", "--prm-backend", "vllm"],
     "--prm-backend 'vllm': the vllm PRM backend runs the families"),
    (["solve", ""], "QUESTION ''"),
    (["solve", "  \n "], "QUESTION"),
    (["solve", Q, "--strategy", "beem"], "--strategy 'beem'"),
    (["solve", Q, "-o", "widht=3"], "-o/--option 'widht=3'"),
    (["solve", Q, "-o", "width"], "--option/-o"),
    (["solve", Q, "--n", "0"], "--n"),
    (["solve", Q, "--n", "2", "-o", "width=4"], "-o/--option 'width=4'"),  # width 4 needs n >= 4
    (["solve", Q, "--seed", "x"], "--seed"),
    (["solve", Q, "--top-p", "2"], "--top-p 2.0"),
    (["solve", Q, "--temperature", "-1"], "--temperature -1.0"),
    (["solve", Q, "--delimiter", ""], "--delimiter ''"),
    (["solve", Q, "--max-depth", "0"], "--max-depth"),
    (["solve", Q, "--max-step-tokens", "0"], "--max-step-tokens"),
    (["bench", "--recipe", "/no/such.yaml"], "--recipe '/no/such.yaml'"),
    (["bench", "--budgets", "0"], "--budgets"),
    (["bench", "--budgets", ","], "--budgets"),
    (["bench", "--seeds", "x"], "--seeds"),
    (["bench", "--limit", "0"], "--limit"),
    (["bench", "--chunk", "0"], "--chunk"),
    (["bench", "--dataset", "nope"], "--dataset 'nope'"),
    (["bench", "--dataset", "/no/such/rows.jsonl"], "--dataset '/no/such/rows.jsonl'"),
    (["bench", "--dataset", "math500", "--split", "train"],
     "got --split train; pass --dataset-path hub:HuggingFaceH4/MATH-500"),
    (["bench", "--strategies", "beem"], "--strategies 'beem'"),
    (["bench", "--strategies", ""], "--strategies"),
    (["bench", "-o", "beam"], "--option/-o"),
    (["bench", "-o", "width=3", "--strategies", "beam"], "-o/--option 'width=3'"),
    (["bench", "-o", "beam.widht=3", "--strategies", "beam"], "-o/--option 'beam.widht=3'"),
    (["bench", "-o", "dvts.width=2", "--strategies", "beam"], "--strategies"),
    (["bench", "--top-p", "0"], "--top-p"),
    (["bench", "--retry-errors"], "--retry-errors"),
    (["bench", "--resume"], "--resume"),
    (["bench", "--ray-workers", "2"], "--ray-workers"),
    (["bench", "--max-consecutive-failures", "-1"], "--max-consecutive-failures"),
    (["bench", "--overlap", "0"], "--overlap"),
    (["bench", "--policy-backend", "vllm"], "--policy-backend 'vllm'"),
    (["bench", "--prm-family", "qwen-prm"], "--prm-family 'qwen-prm'"),
    (["bench", "--prm-backend", "tpu", "--prm", "x", "--prm-family", "verifier"], "unknown PRM backend"),
    (["bench", "--prm-backend", "vllm", "--prm-url", "http://127.0.0.1:1/v1"], "drop it with --prm-url"),
    (["bench", "--prm-url", "http://127.0.0.1:1/v1", "--ray"], "--prm-url 'http://127.0.0.1:1/v1'"),
    (["bench", "--prm-url", "http://127.0.0.1:1/v1", "--recipe", "r.yaml"], "a recipe names its own PRM"),
    (["bench", "--prm-tokenizer", "tok"], "--prm-tokenizer 'tok'"),
    (["serve", "--port", "70000"], "--port"),
    (["serve", "--budgets", "0"], "--budgets"),
    (["serve", "--strategy", "beem"], "--strategy 'beem'"),
]


def run_cli(argv, capsys) -> tuple[int, str]:
    """Exit status and stderr of ``prmsearch ARGV`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "names"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_flag_values_are_one_line_errors(argv, names, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written into the repository
    code, err = run_cli(argv, capsys)
    assert code == 2
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith(f"prmsearch {argv[0]}: error: ")
    assert names in err
    assert "on_error=" not in err and "path=" not in err  # fixes are flags, not Python arguments


@pytest.mark.parametrize(
    "argv", [["solve", Q, "--policy", "/no/such/folder"], ["solve", Q, "--prm", "qwen-prm"]]
)
def test_the_console_script_prints_no_traceback(argv):
    out = subprocess.run([sys.executable, "-m", "prmsearch.cli", *argv], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stderr.count("\n") == 1


@pytest.fixture
def synthetic_bench():
    policy, scorer = synthetic_backends(depth=2)
    register_policy("test-cli-errors", lambda **_: policy, replace=True)
    register_scorer("test-cli-errors", lambda **_: scorer, replace=True)
    return ["bench", "--policy", "test-cli-errors", "--prm", "test-cli-errors", "--strategies", "beam",
            "--budgets", "2", "--no-progress", "--json"]  # fmt: skip


def test_out_folder_problems_name_the_flag(synthetic_bench, tmp_path, capsys):
    args = [*synthetic_bench, "--limit", "1", "--out", str(tmp_path / "run")]
    assert run_cli(args, capsys)[0] == 0
    code, err = run_cli(args, capsys)  # results already there, no --resume
    assert code == 2 and "--out" in err and "--resume" in err and "Traceback" not in err
    (tmp_path / "file").write_text("x")
    code, err = run_cli([*synthetic_bench, "--out", str(tmp_path / "file")], capsys)
    assert code == 2 and f"--out '{tmp_path / 'file'}'" in err and "Traceback" not in err


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_dataset_may_be_a_jsonl_file(synthetic_bench, tmp_path, capsys):
    rows = [{"question": f"Start with {i}. Add 1. What is the result?", "answer": i + 1} for i in range(3)]
    data = _jsonl(tmp_path / "mine.jsonl", rows)
    out = tmp_path / "run"
    code, _ = run_cli([*synthetic_bench, "--dataset", str(data), "--out", str(out)], capsys)
    assert code == 0
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert (config["dataset"], config["dataset_path"]) == ("jsonl", str(data))
    code, err = run_cli([*synthetic_bench, "--dataset", str(data), "--dataset-path", str(data)], capsys)
    assert code == 2 and "give the file once" in err


def test_bad_dataset_rows_name_the_skip_flag(synthetic_bench, tmp_path, capsys):
    data = _jsonl(tmp_path / "rows.jsonl", [{"question": "Start with 2. Add 2. What is the result?",
                                             "answer": "4"}, '{"question": "broken", '])  # fmt: skip
    args = [*synthetic_bench, "--dataset", str(data)]
    code, err = run_cli([*args, "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "rows.jsonl:2: malformed JSON" in err and "pass --skip-bad-rows" in err
    code, err = run_cli([*args, "--out", str(tmp_path / "b"), "--skip-bad-rows"], capsys)
    assert code == 0 and "skipped 1 bad dataset rows" in err


def test_missing_fields_name_the_field_flags(synthetic_bench, tmp_path, capsys):
    row = {"problem": "Start with 2. Add 2. What is the result?", "gold": 4}
    data = _jsonl(tmp_path / "rows.jsonl", [row])
    args = [*synthetic_bench, "--dataset", str(data)]
    code, err = run_cli([*args, "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "pass --question-field <one of them>" in err
    flags = ["--question-field", "problem", "--answer-field", "gold", "--out", str(tmp_path / "b")]
    assert run_cli([*args, *flags], capsys)[0] == 0
    config = json.loads((tmp_path / "b" / "manifest.json").read_text())["config"]
    assert (config["question_field"], config["answer_field"]) == ("problem", "gold")
