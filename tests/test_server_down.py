"""A policy server that dies mid-sweep: the sweep stops after K problems in a row fail to
connect (instead of spending every remaining problem's retries), says how to continue, and a
resume with --retry-errors completes it with one row per problem."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from helpers import synthetic_backends

from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.backend_errors import failure_kind
from prmsearch.benchmarks.sweeps.results import ResultsFolder
from prmsearch.benchmarks.sweeps.sweep import (
    ServerDownError,
    SweepConfig,
    SweepProblem,
    is_connection_error,
    run_sweep,
)
from prmsearch.engines.http import ServerError, ServerRefused, ServerTimeout, ServerUnreachable
from prmsearch.scorers.base import ContextLengthError

PROBLEMS = [SweepProblem(f"p{i}", f"problem {i}", str(i % 4)) for i in range(12)]
DOWN = (
    "http://127.0.0.1:9/v1/completions failed after 5 attempts; last error: connection failed "
    "(ConnectError: [Errno 111] Connection refused)"
)


def grade(answer, gold):
    return answer is not None and canonical_answer(answer) == canonical_answer(gold)


class DyingPolicy:
    """Serves ``alive`` batched calls, then raises ``error`` (a ServerError like a dead HTTP
    server's, by default one that does not say the server is unreachable) until ``revive``;
    counts the calls it got while dead."""

    def __init__(self, policy, alive: int, error: type[Exception] = ServerError) -> None:
        self.policy, self.alive, self.calls, self.dead_calls = policy, alive, 0, 0
        self.error = error

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def revive(self) -> None:
        self.alive = 10**9

    def generate(self, requests):
        self.calls += 1
        if self.calls > self.alive:
            self.dead_calls += 1
            raise self.error(DOWN)
        return self.policy.generate(requests)


def _sweep(out, policy, scorer, config, **kw):
    return run_sweep(config, PROBLEMS, out, policy=policy, scorer=scorer, grade=grade,
                     matcher=AnswerMatcher(), progress=False, **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ServerError(DOWN), True),
        (ServerTimeout("http://x/v1 failed after 5 attempts; timed out", url="http://x/v1", timeout=1,
                       attempts=5), True),
        (ServerUnreachable(DOWN), True),
        (ConnectionRefusedError("[Errno 111] Connection refused"), True),
        (TimeoutError("timed out"), True),
        (ServerRefused("http://x/v1 refused the request with HTTP 400: bad prompt", status=400,
                       body="bad prompt"), False),
        (ContextLengthError("the prompt is longer than the context"), False),
        (ValueError("ServerError: a message that names a connection error is not one"), False),
        (RuntimeError("server returned garbage"), False),
    ],
)
def test_connection_errors_are_told_from_problem_errors_by_type(error, expected):
    assert is_connection_error(failure_kind(error)) is expected
    assert is_connection_error(None) is False


def test_a_dead_server_stops_the_sweep_and_a_retry_completes_it(tmp_path):
    policy, scorer = synthetic_backends(depth=2)
    dying = DyingPolicy(policy, alive=6)  # the first chunks are served, then it dies
    config = SweepConfig(strategies=("beam",), budgets=(4,), chunk=2, max_consecutive_failures=4)
    with pytest.raises(ServerDownError, match=r"4 problems in a row failed with a connection error") as info:
        _sweep(tmp_path, dying, scorer, config)
    rows = list(ResultsFolder(tmp_path).rows())
    assert info.value.failures == 4 and "Connection refused" in info.value.last_error
    assert rows[0]["error"] is None and all(is_connection_error(r["error_kind"]) for r in rows[-4:])
    assert {r["error_kind"] for r in rows[-4:]} == {"server"}
    assert len(rows) < len(PROBLEMS)  # the rest were never tried, so they spent no retries
    assert dying.dead_calls <= 2 * 3  # two dead chunks of two: one batched call, then one per problem

    dying.revive()
    folder = _sweep(tmp_path, dying, scorer, config, resume=True, retry_errors=True)
    rows = list(folder.rows())
    assert sorted(r["qid"] for r in rows) == sorted(p.qid for p in PROBLEMS)
    assert not any(r["error"] for r in rows)


def test_an_unreachable_server_is_not_retried_problem_by_problem(tmp_path):
    """A backend that says it cannot be reached fails its whole chunk in one call: the dead
    server costs one call per chunk, not one per problem."""
    policy, scorer = synthetic_backends(depth=2)
    dying = DyingPolicy(policy, alive=0, error=ServerUnreachable)
    config = SweepConfig(strategies=("beam",), budgets=(4,), chunk=4, max_consecutive_failures=8)
    with pytest.raises(ServerDownError):
        _sweep(tmp_path, dying, scorer, config)
    rows = list(ResultsFolder(tmp_path).rows())
    assert dying.dead_calls == 2  # two dead chunks of four, one batched call each (was 2 x 5)
    assert all("ServerUnreachable" in r["error"] for r in rows if r["error"])
    assert {r["error_kind"] for r in rows if r["error"]} == {"unreachable"}


def test_the_limit_can_be_turned_off(tmp_path):
    policy, scorer = synthetic_backends(depth=2)
    config = SweepConfig(strategies=("beam",), budgets=(4,), chunk=2, max_consecutive_failures=0)
    folder = _sweep(tmp_path, DyingPolicy(policy, alive=0), scorer, config)
    rows = list(folder.rows())
    assert len(rows) == len(PROBLEMS) and all(is_connection_error(r["error_kind"]) for r in rows)
    assert "max_consecutive_failures" not in config.to_dict()  # operational: a resume may change it
    with pytest.raises(ValueError, match="max_consecutive_failures must be an int >= 0"):
        SweepConfig(max_consecutive_failures=-1)


def test_cli_bench_stops_on_a_dead_server_and_says_how_to_continue(tmp_path, capsys):
    from prmsearch import register_policy, register_scorer
    from prmsearch.cli import main

    policy, scorer = synthetic_backends(depth=2)
    dying = DyingPolicy(policy, alive=2)
    register_policy("test-dying", lambda **_: dying, replace=True)
    register_scorer("test-dying", lambda **_: scorer, replace=True)
    args = ["bench", "--strategies", "beam", "--budgets", "4", "--limit", "12", "--chunk", "2",
            "--max-consecutive-failures", "3", "--policy", "test-dying", "--prm", "test-dying",
            "--out", str(tmp_path), "--no-progress", "--json"]  # fmt: skip
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "3 problems in a row failed with a connection error" in captured.err
    assert "the backend looks down" in captured.err
    assert f"`prmsearch bench --resume --retry-errors --out {tmp_path}`" in captured.err
    missing = json.loads(captured.out)["missing"]
    assert [(m["strategy"], m["budget"], m["seed"]) for m in missing] == [("beam", 4, 0)]
    assert "incomplete:" in captured.err and "beam n=4 seed 0:" in captured.err

    dying.revive()
    assert main([*args, "--resume", "--retry-errors"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["missing"] == [] and summary["runs"][0]["n"] == 12 and summary["runs"][0]["errors"] == 0


# --- a real loopback HTTP server that dies mid-sweep ---


def _fault_server():
    pytest.importorskip("httpx")
    sys.path.insert(0, str(Path(__file__).parent / "vllm"))
    from fault_server import FaultServer

    return FaultServer()


class KillsServerAfter:
    """The OpenAI policy, whose server is shut down for good after ``alive`` batched calls."""

    def __init__(self, policy, server, alive: int) -> None:
        self.policy, self.server, self.alive, self.calls = policy, server, alive, 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def generate(self, requests):
        self.calls += 1
        if self.calls == self.alive + 1:
            self.server.close()  # from now on every connection is refused
        return self.policy.generate(requests)


@pytest.mark.parametrize("schedule", ["rounds", "async"])
def test_a_real_server_dying_mid_sweep(tmp_path, schedule):
    from prmsearch.policies.openai import OpenAIPolicy

    server = _fault_server()
    fast = {"timeout": 2.0, "max_retries": 1, "backoff": 0.01, "backoff_max": 0.02}
    policy = KillsServerAfter(OpenAIPolicy(server.url, "fake", **fast), server, alive=4)
    _, scorer = synthetic_backends(depth=2)
    config = SweepConfig(strategies=("beam",), budgets=(2,), chunk=2, max_consecutive_failures=3,
                         schedule=schedule)
    with pytest.raises(ServerDownError) as info:
        _sweep(tmp_path, policy, scorer, config)
    rows = list(ResultsFolder(tmp_path).rows())
    assert any(r["error"] is None for r in rows)  # served before it died
    assert "ServerUnreachable" in info.value.last_error and "connection failed" in info.value.last_error
    assert len(rows) < len(PROBLEMS)
    if schedule == "rounds":
        assert policy.calls - 4 - 1 <= 2  # after it died: one batched call per chunk, none per problem
    else:  # one call per problem, each failing once: none retried
        assert policy.calls - 4 <= 2 * config.chunk


def test_a_closed_port_is_a_connection_error(tmp_path):
    pytest.importorskip("httpx")
    from prmsearch.policies.openai import OpenAIPolicy

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "fake", timeout=2.0, max_retries=0)
    _, scorer = synthetic_backends(depth=2)
    config = SweepConfig(strategies=("beam",), budgets=(2,), chunk=4, max_consecutive_failures=2)
    with pytest.raises(ServerDownError):
        _sweep(tmp_path, policy, scorer, config)
    assert len(list(ResultsFolder(tmp_path).rows())) == 2


class EngineDeadError(RuntimeError):
    """Stands in for vLLM's exception of that name (its engine core process exited)."""


def test_a_dead_in_process_engine_counts_as_a_backend_that_is_down(tmp_path):
    assert failure_kind(EngineDeadError("EngineCore encountered an issue")) == "server"
    assert is_connection_error(failure_kind(EngineDeadError("x")))
    policy, scorer = synthetic_backends(depth=2)
    dying = DyingPolicy(policy, alive=2, error=EngineDeadError)
    config = SweepConfig(strategies=("beam",), budgets=(4,), chunk=2, max_consecutive_failures=4)
    with pytest.raises(ServerDownError, match="a dead engine") as info:
        _sweep(tmp_path, dying, scorer, config)
    assert "EngineDeadError" in info.value.last_error
    rows = list(ResultsFolder(tmp_path).rows())
    assert len(rows) < len(PROBLEMS)  # stopped: the rest wait for a resume with --retry-errors
    assert {r["error_kind"] for r in rows if r["error"]} == {"server"}
