"""A server in a subprocess on a free loopback port, for the tests that need a real one (vLLM's
OpenAI and pooling servers, ``prmsearch serve``): started, waited for on ``/health``, stopped.

The server runs in its own process group, so that stopping it also ends what it started (an
engine's worker processes), even when it dies before it can stop them itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def free_port() -> int:
    """A port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``command`` (which must take the port it is given) in a subprocess, ready once its
    ``/health`` answers 200; its output goes to ``log``.

    Attributes:
        port, base: the port and ``http://127.0.0.1:PORT``; url: ``base + url_path``.
    """

    name = "server"

    def __init__(
        self,
        command: Sequence[str],
        log: Path,
        *,
        port: int,
        start_s: float = 240.0,
        env: dict[str, str] | None = None,
        url_path: str = "/v1",
        poll_s: float = 0.5,
    ) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}{url_path}"
        self.log = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(list(command), stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            self._wait(start_s, poll_s)
        except BaseException:  # a test's time limit (SIGALRM) or ^C while it starts: never leak it
            self.close()
            raise

    def _wait(self, limit: float, poll_s: float) -> None:
        import httpx

        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.flush()
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the {self.name} exited with {self.proc.returncode}; {self.log}:\n{tail}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        self.close()
        raise RuntimeError(f"the {self.name} did not answer /health within {limit:.0f}s; see {self.log}")

    def kill(self) -> None:
        """SIGTERM now, without waiting (a test that kills the server mid-run)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def close(self) -> None:
        """SIGTERM and wait (the server stops its own parts), then kill what is left of its group."""
        self.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()
