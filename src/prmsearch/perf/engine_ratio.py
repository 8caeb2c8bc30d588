"""How close a search comes to its engine: framework throughput over raw engine throughput.

For each engine (the offline vLLM engine, a vLLM OpenAI-compatible server) and each strategy
(beam search, particle filtering, best-of-N) one run measures, back to back on the same engine:

* **framework**: the search over the first arithmetic test problems with the shipped PRM
  in-process (the driver's default schedule: lock step offline, the asynchronous flow over
  HTTP), in generated tokens per second of wall clock, PRM time included;
* **raw**: ONE engine call with the same questions' prompts, ``n = budget`` samples each, and a
  fixed sample length chosen so that the call generates the same number of tokens
  (``min_tokens = max_tokens``, EOS ignored), with the prefix cache emptied first: the
  throughput the engine gives a single ideal batch of the same size, with no step boundaries,
  no PRM and no client.

The ratio framework / raw is the share of the engine's ideal throughput the search keeps. It
is an upper-bound comparison: the raw call decodes long samples from short prompts in one
batch; a step search must stop at every step, prefill each extended path and wait for the PRM.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

Log = Callable[[str], None]
RATIO_ENGINES = ("vllm", "openai")
RATIO_STRATEGIES = ("beam", "particle_filter", "best_of_n")


@dataclass(frozen=True)
class EngineRatioConfig:
    """What the framework / raw measurement runs.

    Attributes:
        problems: first problems of the arithmetic test split.
        budget: N of every strategy, through its budget rule (beam: ``width = gcd(n, 4)``).
        temperature: sampling temperature of both the search and the raw call.
        engines: from ``vllm`` (offline engine) and ``openai`` (a vLLM server on loopback).
        strategies: from beam, particle_filter, best_of_n.
        server_start_s: how long to wait for the server's ``/health``.
    """

    problems: int = 32
    budget: int = 16
    temperature: float = 0.8
    engines: tuple[str, ...] = RATIO_ENGINES
    strategies: tuple[str, ...] = RATIO_STRATEGIES
    server_start_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("problems", "budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, known in (("engines", RATIO_ENGINES), ("strategies", RATIO_STRATEGIES)):
            chosen = tuple(getattr(self, name))
            if not chosen or set(chosen) - set(known):
                raise ValueError(f"{name} must be a non-empty subset of {list(known)}, got {chosen}")
            object.__setattr__(self, name, chosen)


@dataclass(frozen=True)
class RatioFigures:
    """One engine and strategy: the search's and the raw call's throughput."""

    engine: str
    strategy: str
    problems: int
    framework_s: float
    framework_tokens: int
    raw_s: float
    raw_tokens: int
    accuracy: float

    @property
    def framework_tok_s(self) -> float:
        return self.framework_tokens / self.framework_s

    @property
    def raw_tok_s(self) -> float:
        return self.raw_tokens / self.raw_s

    @property
    def ratio(self) -> float:
        return self.framework_tok_s / self.raw_tok_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "framework_tok_s": self.framework_tok_s, "raw_tok_s": self.raw_tok_s,
                "ratio": self.ratio}




def _raw_offline(policy: Any, prompts: list[list[int]], budget: int, length: int,
                 temperature: float) -> tuple[float, int]:
    """One ``LLM.generate`` call: every prompt, ``budget`` samples of exactly ``length`` tokens."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = [SamplingParams(n=budget, temperature=temperature, max_tokens=length, min_tokens=length,
                             ignore_eos=True, seed=0) for _ in prompts]
    policy.clear_caches()
    start = time.perf_counter()
    outputs = policy.generate_raw([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    seconds = time.perf_counter() - start
    return seconds, sum(len(c.token_ids) for out in outputs for c in out.outputs)


def _raw_server(base_url: str, prompts: list[list[int]], budget: int, length: int,
                temperature: float) -> tuple[float, int]:
    """One ``/completions`` request with every prompt (token ids), ``n = budget``, fixed length."""
    import httpx

    root = base_url.rsplit("/v1", 1)[0]
    httpx.post(f"{root}/reset_prefix_cache", timeout=30)  # dev-mode servers only; else ignored
    body = {"model": "arith", "prompt": prompts, "n": budget, "max_tokens": length,
            "min_tokens": length, "ignore_eos": True, "temperature": temperature}
    start = time.perf_counter()
    response = httpx.post(f"{base_url}/completions", json=body, timeout=900)
    seconds = time.perf_counter() - start
    response.raise_for_status()
    return seconds, int(response.json()["usage"]["completion_tokens"])


def _open(engine: str, cfg: EngineRatioConfig, log: Log) -> tuple[Any, Callable[[], None], str | None]:
    """The policy of ``engine``, its release function and (for the server) its base URL."""
    from prmsearch.arith.models import default_policy_path

    policy_dir = default_policy_path()
    if engine == "vllm":
        from prmsearch.policies.vllm import VLLMPolicy

        policy = VLLMPolicy(policy_dir, dtype="float32", max_model_len=256)
        return policy, policy.close, None
    from prmsearch.perf.engines import _Server
    from prmsearch.policies.openai import OpenAIPolicy

    server = _Server(policy_dir, cfg.server_start_s, log, dev_mode=True)
    url = f"http://127.0.0.1:{server.port}/v1"
    policy = OpenAIPolicy(url, "arith", tokenizer=str(policy_dir), server="vllm", context_length=256,
                          prompt_as_ids=True, timeout=300.0)

    def release() -> None:
        policy.close()
        server.close()

    return policy, release, url


def measure_engine(engine: str, policy: Any, scorer: Any, problems: list, cfg: EngineRatioConfig,
                   url: str | None = None, log: Log = print) -> list[RatioFigures]:
    """Every strategy of ``cfg`` on one open engine: ``policy`` is a `VLLMPolicy` (``url``
    None) or an `OpenAIPolicy` on the vLLM server at ``url``."""
    from prmsearch.api import Searcher
    from prmsearch.arith.checker import check_solution
    from prmsearch.engines.prompt_formats import PromptBuilder
    from prmsearch.search.protocol import strategy_spec

    questions = [p.question for p in problems]
    builder = PromptBuilder(policy.prompt_format, policy.tokenizer)
    prompts = [builder.ids(q, ()) for q in questions]
    figures: list[RatioFigures] = []
    for strategy in cfg.strategies:
        searcher = Searcher(policy, scorer, strategy_spec(strategy).at_budget(cfg.budget),
                            sampling=_sampling(cfg.temperature))
        searcher.run(questions[:1])  # warm-up (first-call costs), not measured
        _clear(policy, scorer, url)
        start = time.perf_counter()
        results = searcher.run(questions)
        framework_s = time.perf_counter() - start
        assert searcher.last_ledger is not None
        tokens = searcher.last_ledger.generated_tokens
        length = max(1, round(tokens / (len(prompts) * cfg.budget)))
        if url is None:
            raw_s, raw_tokens = _raw_offline(policy, prompts, cfg.budget, length, cfg.temperature)
        else:
            raw_s, raw_tokens = _raw_server(url, prompts, cfg.budget, length, cfg.temperature)
        correct = sum(r.error is None and check_solution(p, list(r.steps)).answer_correct
                      for p, r in zip(problems, results, strict=True))
        figures.append(RatioFigures(engine, strategy, len(questions), framework_s, tokens, raw_s,
                                    raw_tokens, correct / len(questions)))
        log(f"engine ratio, {engine} {strategy}: {figures[-1].framework_tok_s:,.0f} vs raw "
            f"{figures[-1].raw_tok_s:,.0f} tokens/s ({figures[-1].ratio:.2f})")
    return figures


def run_engine_ratio(cfg: EngineRatioConfig, log: Log = print) -> list[RatioFigures]:
    """Every engine and strategy of ``cfg``, one engine at a time (see the module docstring)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from prmsearch.api import resolve_scorer
    from prmsearch.arith.problems import load_split

    problems = load_split("test", cfg.problems)
    scorer = resolve_scorer(None)
    figures: list[RatioFigures] = []
    for engine in cfg.engines:
        log(f"engine ratio, {engine}: starting")
        policy, release, url = _open(engine, cfg, log)
        try:
            figures += measure_engine(engine, policy, scorer, problems, cfg, url, log)
        finally:
            release()
    return figures


def _sampling(temperature: float) -> Any:
    from prmsearch.policies.base import SamplingParams

    return SamplingParams(temperature=temperature, max_new_tokens=48)


def _clear(policy: Any, scorer: Any, url: str | None) -> None:
    """Empty the caches so that every measured run starts cold."""
    clear = getattr(scorer, "clear_caches", None)
    if callable(clear):
        clear()
    if url is None:
        policy.clear_caches()
    else:
        import httpx

        httpx.post(f"{url.rsplit('/v1', 1)[0]}/reset_prefix_cache", timeout=30)


def table(figures: list[RatioFigures]) -> str:
    """A markdown table of the figures."""
    rows = ["| engine | strategy | problems | framework tokens/s | raw engine tokens/s | framework / raw "
            "| generated tokens | accuracy |", "|---|---|---|---|---|---|---|---|"]
    for f in figures:
        rows.append(f"| {f.engine} | {f.strategy} | {f.problems} | {f.framework_tok_s:,.0f} | "
                    f"{f.raw_tok_s:,.0f} | {f.ratio:.2f} | {f.framework_tokens:,} | {f.accuracy:.1%} |")
    return "\n".join(rows)
