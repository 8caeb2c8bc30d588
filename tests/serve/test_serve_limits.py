"""What one request may spend on a real ``prmsearch serve`` process: requests in flight (429 with
``Retry-After``), a per-request deadline (504, the work dropped) and a bounded drain on SIGTERM.

The faults issue measured the unbounded server: a long request made the next ones wait behind it,
and SIGTERM with one long request in flight kept the server up for 91 s with no client told.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from serve_process import ServeProcess

httpx = pytest.importorskip("httpx")

QUESTION = "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?"
#: A request that searches for many seconds with the embedded models on one thread.
LONG = {"model": "best_of_n-4", "messages": [{"role": "user", "content": QUESTION}], "budget": 4096}


def _post(server: ServeProcess, body: dict, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(f"{server.url}/chat/completions", content=json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=timeout)


def _in_background(server: ServeProcess, body: dict, out: dict) -> threading.Thread:
    def call() -> None:
        try:
            out["reply"] = _post(server, body)
        except httpx.HTTPError as exc:
            out["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 30
    while server.health()["in_flight"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return thread


def test_in_flight_bound_and_deadline(tmp_path):
    server = ServeProcess(["--policy", "flaky-arith", "--budgets", "4", "--max-budget", "4096",
                           "--max-in-flight", "1", "--max-queued", "0", "--request-timeout", "3"],
                          tmp_path / "serve.log")
    try:
        long: dict = {}
        thread = _in_background(server, LONG, long)
        busy = _post(server, {"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}]})
        assert busy.status_code == 429, (busy.text, long, server.health())
        message = busy.json()["error"]["message"]
        assert busy.headers["Retry-After"] == "1"
        assert "--max-in-flight" in message and "--max-queued" in message
        thread.join(timeout=60)
        assert long["reply"].status_code == 504, long
        assert "deadline of 3 s" in long["reply"].json()["error"]["message"]
        assert server.health()["in_flight"] == 0
        # the dropped search's unsent pieces of its round (--max-batch 256 a call) are left out: it
        # ends within one piece, not at the end of its 4096-sample round (21 s on 2 busy cores)
        dropped = time.monotonic()
        while server.health()["pending"] and time.monotonic() < dropped + 120:
            time.sleep(0.05)
        assert time.monotonic() - dropped < 5, "the dropped request's round ran on to its end"
        after = _post(server, {"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}]})
        assert after.status_code == 200
    finally:
        server.close()
    assert "Traceback" not in server.log.read_text()


def test_sigterm_drains_within_its_timeout(tmp_path):
    server = ServeProcess(["--policy", "flaky-arith", "--budgets", "4", "--max-budget", "4096",
                           "--drain-timeout", "2"], tmp_path / "serve.log")
    try:
        long: dict = {}
        thread = _in_background(server, LONG, long)
        start = time.monotonic()
        server.kill()  # SIGTERM with the long request in flight
        server.proc.wait(timeout=60)
        stopped = time.monotonic() - start
        thread.join(timeout=60)
    finally:
        server.close()
    assert stopped < 15, f"the server took {stopped:.1f} s to stop with --drain-timeout 2"
    assert "error" in long or long["reply"].status_code != 200  # the client was told, not left waiting


def test_a_prompt_above_max_prompt_tokens_is_refused_naming_the_cap(tmp_path):
    server = ServeProcess(["--policy", "flaky-arith", "--budgets", "4", "--max-prompt-tokens", "24"],
                          tmp_path / "serve.log")
    try:
        short = _post(server, {"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}]})
        assert short.status_code == 200, short.text
        long_question = QUESTION.replace("What is the result?", "Add 1. Add 2. Add 3. What is the result?")
        refused = _post(server, {"model": "beam-4", "messages": [{"role": "user", "content": long_question}]})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "prompt_too_long" and error["param"] == "messages"
        assert "cap of 24 tokens" in error["message"] and "--max-prompt-tokens" in error["message"]
        assert server.health()["pending"] == 0  # refused before any search
    finally:
        server.close()


def test_a_burst_waits_its_turn_and_only_past_the_queue_is_turned_away(tmp_path):
    server = ServeProcess(["--policy", "flaky-arith", "--budgets", "4", "--max-budget", "4096",
                           "--max-in-flight", "1", "--max-queued", "1"], tmp_path / "serve.log")
    small = {"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}]}
    try:
        long: dict = {}
        first = _in_background(server, {**LONG, "budget": 1024}, long)
        queued: dict = {}
        second = threading.Thread(target=lambda: queued.update(reply=_post(server, small)))
        second.start()
        deadline = time.monotonic() + 30
        while server.health()["queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        health = server.health()
        assert (health["in_flight"], health["queued"]) == (1, 1), health
        turned_away = _post(server, small)
        assert turned_away.status_code == 429 and "--max-queued" in turned_away.json()["error"]["message"]
        first.join(timeout=120)
        second.join(timeout=120)
        assert long["reply"].status_code == 200 and queued["reply"].status_code == 200
        assert server.health()["in_flight"] == 0 and server.health()["queued"] == 0
    finally:
        server.close()
