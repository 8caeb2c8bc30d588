"""``prmsearch serve`` in a subprocess, for the server tests (here and in tests/vllm)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
from server_process import ServerProcess, free_port

PLUGIN = Path(__file__).with_name("flaky_plugin.py")
API_KEY = "test-key-123"


class ServeProcess(ServerProcess):
    """``python -m prmsearch --plugin PLUGIN serve --port P ... ARGS`` (SIGTERM stops it, and the
    server then closes its backends)."""

    name = "prmsearch server"

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 plugin: Path = PLUGIN, start_s: float = 120.0) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "prmsearch", "--plugin", str(plugin), "serve", "--port", str(port),
               "--threads", "1", "--log-level", "warning", *args]
        super().__init__(cmd, log, port=port, start_s=start_s, env=env, poll_s=0.3)

    def health(self) -> dict:
        return httpx.get(f"{self.base}/health", timeout=5.0).json()
