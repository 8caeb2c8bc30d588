"""A real ``prmsearch serve`` process on the embedded models, shared by the server tests.

The server runs the ``flaky-arith`` policy (tests/serve/flaky_plugin.py: the real embedded policy,
failing on purpose for questions holding ``BREAK``) with a bearer key, on a free loopback port.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from serve_process import API_KEY, ServeProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    args = ["--policy", "flaky-arith", "--budgets", "4,16", "--progress-every", "0.05"]
    process = ServeProcess(args, log, {"PRMSEARCH_API_KEY": API_KEY})
    yield process
    process.close()
