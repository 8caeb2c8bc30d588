"""`prmsearch bench` against a real loopback policy server that hangs, answers garbage, answers
slowly or fails one problem: one row per problem, a bounded stop with the way to go on, and a
resume that completes the run (the fault campaign's backend rows; a server that dies mid-sweep is
tests/test_server_down.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("httpx")
sys.path.insert(0, str(Path(__file__).parents[1] / "vllm"))

from fault_server import FaultServer

from prmsearch.cli import main

#: Quick failures: a request is retried once; a hung one is given up after ``HUNG_TIMEOUT`` s (the
#: other cases allow 10 s, so that a busy machine does not turn their answers into timeouts).
FAST = {"max_retries": 1, "backoff": 0.01, "backoff_max": 0.02}
HUNG_TIMEOUT = 0.5


@pytest.fixture
def fault():
    server = FaultServer()
    yield server
    server.close()


def dataset(folder: Path, count: int, poison: set[int] = frozenset()) -> Path:
    """``count`` questions the fault server answers with 7 (``POISON`` ones always get HTTP 500)."""
    path = folder / "questions.jsonl"
    with path.open("w") as f:
        for i in range(count):
            question = f"Start with {i}. Add 4. What is the result?" + (" POISON" if i in poison else "")
            f.write(json.dumps({"id": f"q{i}", "question": question, "answer": "7"}) + "\n")
    return path


def bench(fault: FaultServer, data: Path, out: Path, *more: str, timeout: float = 10.0) -> list[str]:
    args = ["bench", "--dataset", str(data), "--policy", "openai", "--policy-arg", f"base_url={fault.url}",
            "--policy-arg", "model=fake", "--policy-arg", "prompt_format=plain", "--prm", "policy-confidence",
            "--strategies", "beam", "--budgets", "2", "--chunk", "2", "--out", str(out), "--no-progress",
            "--json", *more]  # fmt: skip
    for key, value in {**FAST, "timeout": timeout}.items():
        args += ["--policy-arg", f"{key}={value}"]
    return args


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def one_row_each(out: Path) -> dict[str, dict]:
    got = rows(out)
    by_id = {r["qid"]: r for r in got}
    assert len(by_id) == len(got), "a problem has two rows"
    return by_id


def test_a_hanging_server_stops_the_run_in_bounded_time_and_a_resume_completes_it(fault, tmp_path, capsys):
    data, out = dataset(tmp_path, 12), tmp_path / "run"
    fault.mode, fault.hang_s = "hang", 5.0
    start = time.monotonic()
    assert main(bench(fault, data, out, "--max-consecutive-failures", "3", timeout=HUNG_TIMEOUT)) == 1
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "3 problems in a row failed with a connection error" in err and "timed out" in err
    assert f"prmsearch bench --resume --retry-errors --out {out}" in err
    failed = one_row_each(out)
    assert 3 <= len(failed) < 12 and all(r["error_kind"] == "timeout" for r in failed.values())
    assert took < 60, f"a hung server held the run for {took:.0f} s"

    fault.reset("ok")
    assert main([*bench(fault, data, out), "--resume", "--retry-errors"]) == 0  # with a longer timeout
    done = one_row_each(out)
    assert len(done) == 12 and all(r["error"] is None and r["correct"] for r in done.values())


def test_garbage_answers_are_one_error_row_per_problem_naming_the_reply(fault, tmp_path, capsys):
    data, out = dataset(tmp_path, 6), tmp_path / "run"
    fault.mode = "malformed"
    assert main(bench(fault, data, out, "--max-consecutive-failures", "0")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"][0]["errors"] == 6
    for row in one_row_each(out).values():
        assert "malformed JSON" in row["error"] and fault.url in row["error"]
        assert row["answer"] is None and not row["correct"]


def test_a_slow_server_gives_the_same_rows_as_a_quick_one(fault, tmp_path):
    data = dataset(tmp_path, 4)
    assert main(bench(fault, data, tmp_path / "quick")) == 0
    fault.delay_s = 0.3  # every answer late, inside the client's timeout
    assert main(bench(fault, data, tmp_path / "slow")) == 0
    quick, slow = one_row_each(tmp_path / "quick"), one_row_each(tmp_path / "slow")
    assert quick.keys() == slow.keys()
    for qid, row in quick.items():
        assert row["error"] is None and row["correct"]
        assert (slow[qid]["answer"], slow[qid]["steps"]) == (row["answer"], row["steps"])


def test_one_failing_problem_fails_alone(fault, tmp_path, capsys):
    data, out = dataset(tmp_path, 6, poison={2}), tmp_path / "run"
    assert main(bench(fault, data, out, "--max-consecutive-failures", "2")) == 0
    capsys.readouterr()
    got = one_row_each(out)
    assert len(got) == 6
    assert "HTTP 500" in got["jsonl/2"]["error"]
    assert all(r["error"] is None and r["correct"] for q, r in got.items() if q != "jsonl/2")
