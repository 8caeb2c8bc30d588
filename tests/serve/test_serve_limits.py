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
                           "--max-in-flight", "1", "--request-timeout", "3"], tmp_path / "serve.log")
    try:
        long: dict = {}
        thread = _in_background(server, LONG, long)
        busy = _post(server, {"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}]})
        assert busy.status_code == 429, busy.text
        assert busy.headers["Retry-After"] == "1" and "--max-in-flight" in busy.json()["error"]["message"]
        thread.join(timeout=60)
        assert long["reply"].status_code == 504, long
        assert "deadline of 3 s" in long["reply"].json()["error"]["message"]
        assert server.health()["in_flight"] == 0
        # the dropped search ends at its round's end (cancelling inside a round is not built yet),
        # and the server then answers again
        deadline = time.monotonic() + 120
        while server.health()["pending"] and time.monotonic() < deadline:
            time.sleep(0.2)
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
