"""The fault campaign, input part: bad input everywhere, as one table.

Each case is a command a user could type with input that is wrong: an empty or absurd question,
a damaged file for ``view``, ``eval-prm``, ``train-prm`` or a dataset, an absurd flag value. Every
one must end with exit 2 and one line that names the thing and the fix, with no traceback and
before any model is loaded or any work is done (the embedded models stand in for the user's).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from prmsearch.cli import main


def _files(tmp: Path) -> dict[str, Path]:
    """Damaged inputs of every kind the commands read."""
    tree = {"graph": {"question": "q"}, "nodes": [], "edges": []}
    whole = gzip.compress(json.dumps(tree).encode())
    files = {
        "truncated.json.gz": whole[: len(whole) // 2],
        "notgzip.json.gz": b"plain text, not gzip",
        "tree.graphml": b"this is not XML <<<",
        "list.json": b"[1, 2, 3]",
        "torn.json": b'{"graph": {"question": ',
        "labels.jsonl": b'{"problem_id": "p1", "prompt": "q", "completions": ["a"], "labels": [true], '
        b'"answer_correct": true}\n{"torn',
        "labels-fields.jsonl": b'{"problem_id": "p1", "prompt": "q", "completions": ["a"]}\n',
        "latin1.jsonl": json.dumps({"question": "caf\u00e9", "answer": "1"}).encode("latin-1") + b"\n"
        + b'{"question": "caf\xe9 au lait", "answer": "2"}\n',
        "nul.jsonl": b'{"question": "What is 2+3?", "answer": "5"}\n\x00\x00\x00\n',
        "stepwise.jsonl": b'{"prompt": "q", "completions": ["a", "b"], "labels": [true]}\n',
        "stepwise-bytes.jsonl": b'{"prompt": "\xff", "completions": ["a"], "labels": [true]}\n',
        "responses.jsonl": b'{"question": "q", "answer": "1", "responses": ["a \\\\boxed{1}"]}\n{"torn\n',
        "responses-fields.jsonl": b'{"question": "q", "answer": "1", "samples": []}\n',
    }
    out = {}
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        out[name] = tmp / name
    return out


# (id, argv with {name} for a damaged file, text the one-line error must contain)
CASES = [
    ("empty question", ["solve", ""], "QUESTION"),
    ("blank question", ["solve", "   \n\t"], "QUESTION"),
    ("question not text", ["solve", "What is 2\udcff3?"], "lone surrogate"),
    ("budget zero", ["solve", "What is 2+3?", "--n", "0"], "--n"),
    ("budget of a billion", ["solve", "What is 2+3?", "--n", "1000000000"], "--max-budget 65536"),
    ("option budget of a billion", ["solve", "What is 2+3?", "--strategy", "best_of_n", "-o", "n=1000000000"],
     "--max-budget"),
    ("bench budgets of a billion", ["bench", "--budgets", "4,1000000000", "--out", "{tmp}/b"], "--budgets"),
    ("threads zero", ["solve", "What is 2+3?", "--threads", "0"], "--threads"),
    ("negative temperature", ["solve", "What is 2+3?", "--temperature", "-1"], "--temperature"),
    ("unknown strategy", ["solve", "What is 2+3?", "--strategy", "beem"], "beam"),
    ("truncated tree", ["view", "{truncated.json.gz}"], "is damaged"),
    ("tree not gzip", ["view", "{notgzip.json.gz}"], "is damaged"),
    ("tree not XML", ["view", "{tree.graphml}"], "not a GraphML tree"),
    ("tree a JSON list", ["view", "{list.json}"], "not a prmsearch tree"),
    ("tree torn JSON", ["view", "{torn.json}"], "is damaged"),
    ("eval-prm torn labels", ["eval-prm", "--labels", "{labels.jsonl}"], "labels.jsonl:2"),
    ("eval-prm row lacking a field", ["eval-prm", "--labels", "{labels-fields.jsonl}"],
     "lacks answer_correct"),
    ("dataset not UTF-8", ["bench", "--dataset", "{latin1.jsonl}", "--out", "{tmp}/l"], "latin1.jsonl"),
    ("dataset with NUL bytes", ["bench", "--dataset", "{nul.jsonl}", "--out", "{tmp}/n"], "nul.jsonl"),
    ("train-prm bad row", ["train-prm", "--data", "{stepwise.jsonl}", "--out", "{tmp}/p"],
     "stepwise.jsonl:1"),
    ("train-prm bytes", ["train-prm", "--data", "{stepwise-bytes.jsonl}", "--out", "{tmp}/p2"], "not UTF-8"),
    ("aggregate missing file", ["aggregate", "{tmp}/no-such.jsonl"], "no-such.jsonl"),
    ("aggregate torn line", ["aggregate", "{responses.jsonl}"], "responses.jsonl:2: malformed JSON"),
    ("aggregate row lacking responses", ["aggregate", "{responses-fields.jsonl}"],
     "responses-fields.jsonl:1: field 'responses'"),
]


@pytest.mark.parametrize(("argv", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line(tmp_path, capsys, argv, named):
    files = {"{" + name + "}": str(path) for name, path in _files(tmp_path).items()}
    files["{tmp}"] = str(tmp_path)
    args = []
    for arg in argv:
        for placeholder, value in files.items():
            arg = arg.replace(placeholder, value)
        args.append(arg)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own refusals exit 2 the same way
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert named in err, err


def test_a_dataset_line_that_is_not_utf8_can_be_skipped(tmp_path, capsys):
    """--skip-bad-rows passes over the bad line and keeps the good one (the run goes on)."""
    data = _files(tmp_path)["latin1.jsonl"]
    from prmsearch.benchmarks.datasets import load_dataset

    problems = load_dataset("jsonl", path=str(data), on_error="skip")
    assert len(problems) == 1 and [e.line for e in problems.errors] == [2]
    assert "not UTF-8" in problems.errors[0].message


def test_the_python_api_refuses_a_lone_surrogate_by_name():
    """``solve()`` raised UnicodeEncodeError deep in the tokenizer; now a ValueError that says what."""
    from prmsearch import solve

    with pytest.raises(ValueError, match="lone surrogate"):
        solve("What is 2\ud800 + 3?", strategy="greedy")


def _solve_from_stdin(data: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prmsearch", "solve", "-", "--strategy", "greedy",
                           "--threads", "1"], input=data, capture_output=True, timeout=300)


def test_an_enormous_question_is_one_line_naming_the_context_not_a_traceback():
    """A 1 MB question (on standard input: a shell argument holds about 128 KB) is refused by the
    policy with its token count and the model's context, after nothing was generated."""
    proc = _solve_from_stdin(("Add 1. " * 150_000).encode())
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "the prompt has 600003 tokens, the model context only 256" in err
    assert "shorten the question" in err


def test_a_question_on_stdin_is_solved_and_a_bad_one_named():
    proc = _solve_from_stdin(b"Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?\n")
    assert proc.returncode == 0 and "47" in proc.stdout.decode(), proc.stderr.decode()
    proc = _solve_from_stdin(b"caf\xe9?")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "standard input is not UTF-8" in err and "Traceback" not in err
