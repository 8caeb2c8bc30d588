"""The policy engines side by side: one beam search through transformers, vLLM and an
OpenAI-compatible vLLM server, in one run, with the same problems, seeds, scorer and settings.

Per engine: problems per second (wall clock of the batched search, scoring included), the policy
prefix-cache hit rate (prompt tokens served from cache / all prompt tokens, as each backend
reports them), accuracy and the policy's generated tokens. The scorer is the shipped arithmetic
PRM when it exists, else the PRM-free ``policy-confidence`` scorer over the policy; it is the
same object for every engine, so differences come from the policy engines only.

Only one engine runs at a time (the others are closed first): the machine's cores go to one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

Log = Callable[[str], None]
ENGINES = ("hf", "vllm", "openai")


@dataclass(frozen=True)
class EngineBenchConfig:
    """What the engine benchmark runs.

    Attributes:
        problems: first problems of the arithmetic test split.
        n: beam-search budget (generations per step); ``width`` beams are kept.
        width: beam width.
        temperature, max_step_tokens, max_depth: sampling and search limits.
        seed: run seed (problem seeds derive from it).
        engines: which of ``hf``, ``vllm``, ``openai`` to run, in order.
        server_start_s: how long to wait for the OpenAI server's ``/health``.
    """

    problems: int = 32
    n: int = 16
    width: int = 4
    temperature: float = 0.8
    max_step_tokens: int = 48
    max_depth: int = 12
    seed: int = 0
    engines: tuple[str, ...] = ENGINES
    server_start_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("problems", "n", "width", "max_step_tokens", "max_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        bad = [e for e in self.engines if e not in ENGINES]
        if bad or not self.engines:
            raise ValueError(f"engines must be a non-empty subset of {list(ENGINES)}, got {self.engines}")


@dataclass
class EngineFigures:
    """The measurements of one engine."""

    engine: str
    problems: int
    seconds: float
    problems_per_s: float
    prefix_hit_rate: float
    prompt_tokens_computed: int
    prompt_tokens_cached: int
    generated_tokens: int
    accuracy: float
    errors: int


def _scorer(policy_dir: Path) -> tuple[Any, str]:
    from prmsearch.arith.defaults import default_prm_path
    from prmsearch.arith.models import ShippedModelError
    from prmsearch.scorers.base import make_scorer

    try:
        prm = default_prm_path()
    except ShippedModelError:
        scorer = make_scorer("policy-confidence", model=str(policy_dir), device="cpu", aggregation="min")
        return scorer, "policy-confidence"
    return make_scorer("qwen-prm", model=str(prm), device="cpu"), f"shipped PRM ({prm})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    """The vLLM OpenAI-compatible server over the policy, on a free loopback port."""

    def __init__(self, policy_dir: Path, wait_s: float, log: Log, dev_mode: bool = False,
                 served: str = "arith", args: Sequence[str] = ("--dtype", "float32",
                                                               "--max-model-len", "256")) -> None:
        import httpx

        self.port = _free_port()
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(policy_dir),
               "--served-model-name", served, "--host", "127.0.0.1", "--port", str(self.port),
               "--block-size", "32", "--enforce-eager", *args,
               "--enable-prompt-tokens-details", "--no-enable-chunked-prefill"]
        # dev mode adds POST /reset_prefix_cache (cold caches between measured runs)
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"} if dev_mode else None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited with {self.proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    log(f"server up on port {self.port}")
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.close()
        raise RuntimeError(f"the vLLM server did not answer /health within {wait_s:.0f}s")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _open(engine: str, policy_dir: Path, cfg: EngineBenchConfig, log: Log) -> tuple[Any, Callable[[], None]]:
    """The policy of ``engine`` and a function that releases it."""
    if engine == "hf":
        from prmsearch.policies.hf import HFPolicy

        return HFPolicy(policy_dir, device="cpu", dtype="float32"), lambda: None
    if engine == "vllm":
        from prmsearch.policies.vllm import VLLMPolicy

        policy = VLLMPolicy(policy_dir, dtype="float32", max_model_len=256)
        return policy, policy.close
    from prmsearch.policies.openai import OpenAIPolicy

    server = _Server(policy_dir, cfg.server_start_s, log)
    policy = OpenAIPolicy(f"http://127.0.0.1:{server.port}/v1", "arith", tokenizer=str(policy_dir),
                          server="vllm", context_length=256, prompt_as_ids=True, timeout=120.0)
    return policy, server.close


def run_engine_bench(cfg: EngineBenchConfig, log: Log = print) -> tuple[list[EngineFigures], str]:
    """Run the beam search through every engine of ``cfg``; the figures and the scorer used."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from prmsearch.api import Searcher
    from prmsearch.arith.checker import check_solution
    from prmsearch.arith.models import default_policy_path
    from prmsearch.arith.problems import load_split
    from prmsearch.policies.base import SamplingParams

    policy_dir = default_policy_path()
    problems = load_split("test", cfg.problems)
    scorer, scorer_name = _scorer(policy_dir)
    log(f"scorer: {scorer_name}; {len(problems)} problems, beam n={cfg.n} width={cfg.width}")
    sampling = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_step_tokens)
    figures = []
    for engine in cfg.engines:
        log(f"{engine}: starting")
        policy, release = _open(engine, policy_dir, cfg, log)
        try:
            searcher = Searcher(policy, scorer, "beam", n=cfg.n, width=cfg.width, sampling=sampling,
                                max_depth=cfg.max_depth, seed=cfg.seed)
            searcher.run([problems[0].question])  # warm-up (first-call costs), not measured
            start = time.perf_counter()
            results = searcher.run([p.question for p in problems])
            seconds = time.perf_counter() - start
        finally:
            release()
        ledger = searcher.last_ledger
        prompt = ledger.prompt_tokens_computed + ledger.prompt_tokens_cached
        correct = sum(
            r.error is None and check_solution(p, list(r.steps)).answer_correct
            for p, r in zip(problems, results, strict=True)
        )
        figures.append(EngineFigures(
            engine=engine, problems=len(problems), seconds=seconds,
            problems_per_s=len(problems) / seconds,
            prefix_hit_rate=ledger.prompt_tokens_cached / prompt if prompt else 0.0,
            prompt_tokens_computed=ledger.prompt_tokens_computed,
            prompt_tokens_cached=ledger.prompt_tokens_cached,
            generated_tokens=ledger.generated_tokens,
            accuracy=correct / len(problems),
            errors=sum(r.error is not None for r in results),
        ))
        log(f"{engine}: {figures[-1].problems_per_s:.2f} problems/s")
    return figures, scorer_name


def table(figures: list[EngineFigures]) -> str:
    """A markdown table of the figures."""
    rows = ["| engine | problems/s | prefix-cache hit rate | prompt computed | prompt cached | "
            "generated | accuracy | errors |", "|---|---|---|---|---|---|---|---|"]
    for f in figures:
        rows.append(f"| {f.engine} | {f.problems_per_s:.2f} | {f.prefix_hit_rate:.1%} | "
                    f"{f.prompt_tokens_computed} | {f.prompt_tokens_cached} | {f.generated_tokens} | "
                    f"{f.accuracy:.1%} | {f.errors} |")
    return "\n".join(rows)


def to_dicts(figures: list[EngineFigures]) -> list[dict[str, Any]]:
    return [asdict(f) for f in figures]
