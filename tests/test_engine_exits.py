"""Every way out closes the engines: SIGTERM ends a command as Ctrl-C does, tracked engines are
closed at exit, ``with`` blocks close their backends, and a watchdog stops the engine processes of
a parent killed outright. No engine here: the processes a real vLLM engine starts are covered in
tests/vllm/test_j_engine_lifetime.py; these check the parts on stand-ins.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from prmsearch.backend_hooks import PolicyBackend
from prmsearch.cli.termination import Terminated, terminate_by_exception
from prmsearch.engines import open_engines


def test_sigterm_raises_terminated_in_the_main_thread_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught, terminate_by_exception():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert caught.value.signal_number == signal.SIGTERM
    assert isinstance(caught.value, KeyboardInterrupt)  # stops what stops cleanly on Ctrl-C
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_the_user_ignores_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
    try:
        with terminate_by_exception():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


class Engine:
    """A stand-in engine that counts its closes."""

    def __init__(self) -> None:
        self.closed = 0


def close_engine(engine: Engine) -> None:
    engine.closed += 1
    open_engines.untrack(engine)


def test_open_engines_are_closed_once_each_and_closed_ones_are_forgotten():
    first, second, done = Engine(), Engine(), Engine()
    for engine in (first, second, done):
        open_engines.track(engine, close_engine)
    close_engine(done)  # closed by its owner before the exit
    assert done not in open_engines.open_engines()
    assert open_engines.close_open_engines() == 2
    assert (first.closed, second.closed, done.closed) == (1, 1, 1)
    assert open_engines.close_open_engines() == 0  # nothing twice


def test_a_failing_close_does_not_keep_the_others_open():
    def broken(engine):
        raise RuntimeError("engine already gone")

    good, bad = Engine(), Engine()
    open_engines.track(bad, broken)
    open_engines.track(good, close_engine)
    assert open_engines.close_open_engines() == 2
    assert good.closed == 1


class Backend:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_searcher_closes_its_backends_at_the_end_of_its_with_block_even_on_error():
    from prmsearch.api import Searcher
    from prmsearch.policies.base import make_policy
    from prmsearch.scorers.base import NoScorer

    policy = make_policy("arith")
    closing = Backend()
    policy.close = closing.close  # type: ignore[attr-defined]
    searcher = Searcher(policy, NoScorer(), "greedy")
    with pytest.raises(RuntimeError, match="caller's own"), searcher:
        assert searcher("Start with 7. Add 5. What is the result?").answer is not None
        raise RuntimeError("the caller's own error")
    assert closing.closed == 1


def test_solve_closes_what_it_loaded_and_leaves_what_it_was_given(monkeypatch):
    from prmsearch import api
    from prmsearch.policies.base import make_policy

    loaded: list[Backend] = []

    def load_policy(name, backend=None, **kwargs):
        policy = make_policy("arith")
        closing = Backend()
        policy.close = closing.close  # type: ignore[attr-defined]
        loaded.append(closing)
        return policy

    monkeypatch.setattr(api, "resolve_policy", load_policy)
    api.solve("Start with 7. Add 5. What is the result?", "some-model", strategy="greedy")
    assert [b.closed for b in loaded] == [1]

    given = make_policy("arith")
    given_closing = Backend()
    given.close = given_closing.close  # type: ignore[attr-defined]
    monkeypatch.setattr(api, "resolve_policy", lambda policy, backend=None, **kw: policy)
    api.solve("Start with 7. Add 5. What is the result?", given, strategy="greedy")
    assert given_closing.closed == 0  # the caller's to close


PARENT = """
import subprocess, sys, time
from prmsearch.engines.orphan_watchdog import ensure_watchdog

# a stand-in engine process: it names itself as vLLM's engine processes do, then waits
CHILD = ("import time; open('/proc/self/comm', 'w').write('VLLM::Fake'); print('named', flush=True); "
         "time.sleep(600)")
if __name__ == "__main__":
    ensure_watchdog()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "named"
    print(child.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/comm").exists(), reason="the watchdog reads /proc (Linux)")
def test_the_watchdog_stops_the_engine_processes_of_a_parent_killed_outright(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        time.sleep(2.5)  # the watchdog has looked at the tree at least once
        parent.kill()  # SIGKILL: no exit code of the parent runs
        parent.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _running(child):
            time.sleep(0.1)
        assert not _running(child), "the stand-in engine outlived its killed parent"
    finally:
        parent.kill()
        if child is not None and _running(child):
            os.kill(child, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_stops_a_bench_like_ctrl_c_keeping_its_rows_and_naming_the_resume(tmp_path):
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "prmsearch.cli", "bench", "--strategies", "beam", "--budgets", "16",
               "--limit", "200", "--chunk", "1", "--out", str(out), "--no-progress"]
    bench = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    rows = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and bench.poll() is None and not (rows.is_file() and rows.read_text()):
        time.sleep(0.1)
    bench.send_signal(signal.SIGTERM)
    _, stderr = bench.communicate(timeout=60)
    assert bench.returncode == 128 + signal.SIGTERM, stderr
    assert "prmsearch bench: stopped by SIGTERM; `prmsearch bench --resume --out" in stderr
    assert "Traceback" not in stderr
    kept = rows.read_text().splitlines()
    assert kept and all(line.startswith("{") and line.endswith("}") for line in kept)  # whole rows


class SlowPolicy(PolicyBackend):
    """The embedded policy, a second slower per call: a search that takes a while."""

    def __init__(self) -> None:
        from prmsearch.policies.base import make_policy

        self.inner = make_policy("arith")

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, requests):
        time.sleep(1.0)
        return self.inner.generate(requests)


def test_a_session_left_by_an_error_drops_its_questions_instead_of_waiting_for_them():
    from prmsearch.api import Searcher
    from prmsearch.scorers.base import NoScorer

    searcher = Searcher(SlowPolicy(), NoScorer(), "greedy", max_depth=32)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), searcher.session() as session:
        future = session.submit("Start with 7. Add 5. Multiply by 3. Subtract 6. What is the result?")
        raise KeyboardInterrupt  # Ctrl-C (or SIGTERM, raised as one) while the search runs
    assert time.monotonic() - started < 1.5  # not the whole search
    assert future.cancelled()


class SlowParallelPolicy(SlowPolicy):
    """A slow policy whose calls may run on several threads: the driver runs its flow schedule."""

    parallel_calls = True

    def generate(self, requests):
        time.sleep(3.0)
        return self.inner.generate(requests)


def test_a_search_interrupted_mid_call_returns_without_waiting_for_the_call():
    """Ctrl-C (and SIGTERM, raised as one) while a backend call runs on the flow's threads: the
    search stops at once instead of waiting for the call in flight."""
    import threading

    from prmsearch.api import Searcher
    from prmsearch.scorers.base import NoScorer

    searcher = Searcher(SlowParallelPolicy(), NoScorer(), "greedy", schedule="async")
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        searcher.run(["Start with 7. Add 5. Multiply by 3. Subtract 6. What is the result?"])
    assert time.monotonic() - started < 2.5  # the 3-second call was not waited for
