"""Session fixtures for the vLLM / OpenAI-server tests: real engines, one at a time.

The whole folder is skipped (with the reason) when vLLM is not importable. At most ONE vLLM
engine or server runs at any moment (the machine has few cores): :class:`EngineSlot` closes the
current engine before it starts another, and the test files are ordered (``test_a_`` policy,
``test_b_`` PRM, ``test_c_`` server, ``test_d_`` fault server without any engine) so that each
engine starts once per session. Only the engine tests need vLLM (each of their files skips
without it); the fault tests need httpx only.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("httpx")

from server_process import ServerProcess, free_port

from prmsearch.arith.models import default_policy_path

TEST_TIMEOUT_S = 240


@pytest.fixture(autouse=True)
def _no_hang(request):
    """Fail any test that runs longer than ``TEST_TIMEOUT_S`` (SIGALRM; no plugin needed)."""
    limit = int(getattr(request.node.get_closest_marker("time_limit"), "args", [TEST_TIMEOUT_S])[0])

    def expire(signum, frame):
        raise TimeoutError(f"{request.node.nodeid} ran longer than {limit}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): fail the test after this many seconds")


class EngineSlot:
    """Holds at most one engine (policy, PRM or server); asking for another closes the current."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.engine: Any = None

    def get(self, name: str, start: Callable[[], Any]) -> Any:
        if self.name != name:
            self.close()
            self.engine = start()
            self.name = name
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.name = None


@pytest.fixture(scope="session")
def slot() -> Iterator[EngineSlot]:
    s = EngineSlot()
    yield s
    s.close()


@pytest.fixture(scope="session")
def policy_dir() -> Path:
    """The shipped arithmetic policy (Qwen2, head_dim 64, context 256)."""
    return default_policy_path()


@pytest.fixture(scope="session")
def prm_dir(tmp_path_factory, policy_dir) -> Path:
    """A train-free tiny ``Qwen2ForProcessRewardModel`` with the arithmetic tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config

    from prmsearch.scorers.heads import build_qwen_prm, save_qwen_prm

    tok = AutoTokenizer.from_pretrained(str(policy_dir))
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64,
                      max_position_embeddings=1024, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    prm = build_qwen_prm(cfg, seed=3)
    with torch.no_grad():  # spread the head's outputs so scores are not all ~0.5
        prm.head[2].weight.mul_(5)  # (x30 saturates every score at ~0 with the 256-symbol tokenizer)
    folder = tmp_path_factory.mktemp("tiny_prm")
    save_qwen_prm(prm, folder, tok)
    return folder


@pytest.fixture(scope="session")
def hf_policy(policy_dir):
    from prmsearch.policies.hf import HFPolicy

    return HFPolicy(policy_dir, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def hf_prm(prm_dir):
    from prmsearch.scorers.hf import HFPRMScorer

    return HFPRMScorer(prm_dir, "qwen-prm", device="cpu", dtype="float32")


@pytest.fixture
def vllm_policy(slot, policy_dir):
    from prmsearch.policies.vllm import VLLMPolicy

    return slot.get("policy", lambda: VLLMPolicy(policy_dir, dtype="float32", max_model_len=256))


@pytest.fixture
def vllm_prm(slot, prm_dir):
    from prmsearch.scorers.vllm import VLLMPRMScorer

    return slot.get("prm", lambda: VLLMPRMScorer(prm_dir, dtype="float32", max_model_len=1024))


class Server(ServerProcess):
    """A vLLM OpenAI-compatible server of the shipped policy in a subprocess."""

    name = "vLLM server"

    def __init__(self, model: Path, log: Path) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", "arith", "--host", "127.0.0.1", "--port", str(port),
               "--block-size", "32", "--enforce-eager", "--dtype", "float32",
               "--max-model-len", "256", "--enable-prompt-tokens-details", "--no-enable-chunked-prefill"]
        super().__init__(cmd, log, port=port, start_s=240.0, poll_s=1.0)


@pytest.fixture
def server(slot, policy_dir, tmp_path_factory) -> Server:
    log = tmp_path_factory.mktemp("server") / "server.log"
    return slot.get("server", lambda: Server(policy_dir, log))


@pytest.fixture(scope="session")
def questions() -> list[str]:
    from prmsearch.arith.problems import load_split

    return [p.question for p in load_split("test", 8)]
