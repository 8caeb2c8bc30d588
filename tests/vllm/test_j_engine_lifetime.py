"""Engines that fit, end and keep quiet: the commands with a real vLLM CPU engine, started as a
new user would (no KV cache variable set, no log level set), stopped normally, by SIGTERM in the
middle of a run, and by a parent that dies without closing anything; no engine process is left.

Each command runs in a subprocess of its own session; every ``VLLM::`` process it starts is noted
while it runs, and after it ends none of them may still be alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

from server_process import free_port  # noqa: E402

PLUGIN = Path(__file__).with_name("serve_vllm_plugin.py")

#: Variables a new user has not set: the engine is sized and quieted by prmsearch.
UNSET = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_STREAM", "PYTHONWARNINGS",
         "TORCH_LOGS", "TORCH_CPP_LOG_LEVEL", "TRANSFORMERS_VERBOSITY")


def new_user_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["HF_HUB_OFFLINE"] = "1"
    return env


class Run:
    """``command`` in a subprocess of its own session; :meth:`watch` notes every engine process
    it has started (pid -> start time) while it runs."""

    def __init__(self, command: list[str], folder: Path) -> None:
        self.out, self.err = folder / "stdout.txt", folder / "stderr.txt"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(command, stdout=out, stderr=err, env=new_user_env(),
                                         start_new_session=True)
        self.engines: dict[int, float] = {}

    def watch(self) -> None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if child.name().startswith("VLLM"):
                        self.engines[child.pid] = child.create_time()

    def until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Watch until ``condition()`` holds (True) or the process has ended or time is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.watch()
            if condition():
                return True
            time.sleep(0.2)
        return False

    def finish(self, timeout: float) -> int:
        self.until(lambda: False, timeout)
        if self.proc.poll() is None:
            self.kill()
            pytest.fail(f"still running after {timeout}s:\n{self.stderr()}")
        return self.proc.returncode

    def left_behind(self, grace: float = 10.0) -> list[int]:
        """The engine processes still alive ``grace`` seconds after the command ended."""
        deadline = time.monotonic() + grace
        while True:
            alive = [pid for pid, born in self.engines.items() if _alive(pid, born)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid, born in self.engines.items():
            if _alive(pid, born):
                os.kill(pid, signal.SIGKILL)

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


def _alive(pid: int, born: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == born and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def run(slot, tmp_path):
    """Start ``prmsearch ARGS`` (with the vllm-arith plugin) once no other engine runs."""
    slot.close()
    runs: list[Run] = []

    def start(*args: str) -> Run:
        folder = tmp_path / f"run{len(runs)}"
        folder.mkdir()
        runs.append(Run([sys.executable, "-m", "prmsearch.cli", "--plugin", str(PLUGIN), *args], folder))
        return runs[-1]

    yield start
    for r in runs:
        r.kill()


def assert_quiet(stderr: str) -> None:
    """Only prmsearch's own lines: no engine warnings, no traceback."""
    for word in ("WARNING", "Traceback", "Warning", "triton", "Triton", "LD_PRELOAD"):
        assert word not in stderr, stderr


@pytest.mark.time_limit(300)
def test_solve_prints_the_answer_and_its_own_lines_only_and_leaves_no_engine(run):
    solve = run("solve", "Start with 7. Add 5. Multiply by 3. What is the result?", "--policy", "vllm-arith",
                "--strategy", "greedy")
    assert solve.finish(240) == 0, solve.stderr()
    lines = solve.stdout().splitlines()
    assert lines[-2].startswith("answer: ") and lines[-1].startswith("cost: "), lines
    assert all(line.startswith(("[", "answer: ", "cost: ")) for line in lines), lines
    assert "prmsearch: vLLM KV cache for " in solve.stderr()  # the size it picked, in one line
    assert_quiet(solve.stderr())
    assert solve.engines, "the engine's processes were never seen"
    assert solve.left_behind() == []


@pytest.mark.time_limit(400)
def test_bench_stopped_by_sigterm_mid_run_closes_its_engine_and_says_how_to_resume(run, tmp_path):
    out = tmp_path / "bench"
    bench = run("bench", "--policy", "vllm-arith", "--strategies", "beam", "--budgets", "4", "--limit", "40",
                "--chunk", "2", "--out", str(out), "--no-progress")
    rows = out / "results.jsonl"
    assert bench.until(lambda: rows.is_file() and rows.read_text().count("\n") >= 1, 300), bench.stderr()
    bench.proc.send_signal(signal.SIGTERM)
    assert bench.finish(60) == 128 + signal.SIGTERM, bench.stderr()
    stderr = bench.stderr()
    assert "prmsearch bench: stopped by SIGTERM" in stderr and "--resume" in stderr
    assert_quiet(stderr)
    assert bench.engines and bench.left_behind() == []


@pytest.mark.time_limit(400)
def test_serve_drains_a_request_then_closes_its_engine_on_sigterm(run):
    httpx = pytest.importorskip("httpx")
    port = free_port()
    serve = run("serve", "--policy", "vllm-arith", "--budgets", "4", "--port", str(port),
                "--log-level", "warning")
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{base}/health", timeout=2).status_code == 200
        return False

    assert serve.until(healthy, 300), serve.stderr()
    answers: list[int] = []
    body = {"model": "beam-4", "messages": [{"role": "user", "content": "Start with 7. Add 5. Add 2."}]}
    asking = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120).status_code))
    asking.start()
    time.sleep(0.5)  # the request is in flight
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.finish(120) == 0, serve.stderr()
    asking.join(10)
    assert answers == [200]  # drained first, then closed
    assert serve.stderr().endswith("prmsearch serve: stopped\n")
    assert_quiet(serve.stderr())
    assert serve.engines and serve.left_behind() == []


SCRIPT = """
import sys, time
from prmsearch.arith.models import default_policy_path
from prmsearch.policies.vllm import VLLMPolicy

if __name__ == "__main__":
    policy = VLLMPolicy(default_policy_path(), dtype="float32", max_model_len=256)
    print("ENGINE-READY", flush=True)
    time.sleep(600)
"""


@pytest.mark.time_limit(300)
def test_a_program_killed_without_closing_its_engine_leaves_none_behind(run, tmp_path):
    """SIGKILL: no Python exit code runs; the watchdog stops the engine's processes."""
    script = tmp_path / "leaves_its_engine_open.py"
    script.write_text(SCRIPT)
    program = Run([sys.executable, str(script)], tmp_path)
    try:
        assert program.until(lambda: "ENGINE-READY" in program.stdout(), 240), program.stderr()
        program.watch()
        assert program.engines
        program.proc.send_signal(signal.SIGKILL)
        program.proc.wait(10)
        assert program.left_behind(grace=15) == []
    finally:
        program.kill()


@pytest.mark.time_limit(500)
def test_label_and_eval_prm_close_their_engines_at_the_end(run, tmp_path, prm_dir):
    out = tmp_path / "labels"
    label = run("label", "--policy", "vllm-arith", "--method", "mc", "--limit", "2", "--samples", "2",
                "--rollouts", "1", "--out", str(out), "--no-progress")
    assert label.finish(240) == 0, label.stderr()
    assert (out / "labels.jsonl").read_text().strip()
    assert_quiet(label.stderr())
    assert label.engines and label.left_behind() == []
    evaluate = run("eval-prm", "--labels", str(out / "labels.jsonl"), "--prm", str(prm_dir),
                   "--prm-family", "qwen-prm", "--prm-backend", "vllm")
    assert evaluate.finish(240) == 0, evaluate.stderr()
    assert_quiet(evaluate.stderr())
    assert evaluate.engines and evaluate.left_behind() == []


HOG = """
import sys, time
held = bytearray(int(sys.argv[1]))
for i in range(0, len(held), 4096):
    held[i] = 1  # touch every page: the memory is really in use
print("HELD", flush=True)
time.sleep(600)
"""


@pytest.mark.time_limit(420)
def test_an_engine_sizes_itself_to_what_another_process_leaves_free(run, tmp_path):
    from prmsearch.engines.memory_fit import GIB, available_memory_bytes

    free_before = available_memory_bytes()
    held = min(8 * GIB, free_before // 3)
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "HELD"
        solve = run("solve", "Start with 7. Add 5. What is the result?", "--policy", "vllm-arith",
                    "--strategy", "greedy")
        assert solve.finish(360) == 0, solve.stderr()
    finally:
        hog.kill()
    line = next(line for line in solve.stderr().splitlines() if "vLLM KV cache for" in line)
    free_seen = float(line.split("GiB (")[1].split(" GiB free")[0]) * GIB
    assert free_seen < free_before - 0.8 * held  # it planned with what the other process left
    assert solve.left_behind() == []
