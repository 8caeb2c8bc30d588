"""A real ``prmsearch serve`` process in a subprocess, for the server tests (here and in tests/vllm)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

PLUGIN = Path(__file__).with_name("flaky_plugin.py")
API_KEY = "test-key-123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """``python -m prmsearch serve ...`` in a subprocess; stopped by SIGTERM (then killed)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 plugin: Path = PLUGIN, start_s: float = 120.0) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        self.log = log
        cmd = [sys.executable, "-m", "prmsearch", "--plugin", str(plugin), "serve", "--port", str(self.port),
               "--threads", "1", "--log-level", "warning", *args]
        self._log = log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        self._wait(start_s)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-3000:]
                raise RuntimeError(f"prmsearch serve exited {self.proc.returncode}: {tail}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.close()
        raise RuntimeError(f"prmsearch serve did not start in {timeout}s: {self.log.read_text()[-3000:]}")

    def health(self) -> dict:
        return httpx.get(f"{self.base}/health", timeout=5.0).json()

    def close(self) -> None:
        """SIGTERM (the server closes its backends), then whatever of its process group is left
        (an engine's worker processes) is killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()
