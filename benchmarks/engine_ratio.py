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

* **raw to EOS** (once per engine): the same call with the samples' natural lengths (each stops
  at EOS or at the whole-solution cap the searches use, as best-of-N's solutions do). Its batch
  thins out as samples end and the longest sample sets the call's length, so framework / raw to
  EOS splits the gap: what the engine loses to ragged sample lengths under any client, and what
  the search itself loses (step boundaries, prefills, PRM, driver).

With ``recipe`` set, the same measurement runs a real model instead of the embedded ones: the
recipe's policy folder on both engines, its PRM (or policy confidence), sampling, search limits,
strategy options and dataset sample (its first ``problems`` problems), graded against the gold
answers. Each row also reports PRM tokens/s, the policy's prefix-cache hit rate and the share of
the wall clock the policy engine sat idle (no policy call running: PRM, driver and client time).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
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
        recipe: a ``prmsearch bench`` recipe of a real model (its policy folder, PRM, sampling,
            strategy options and dataset); None: the embedded arithmetic models.
    """

    problems: int = 32
    budget: int = 16
    temperature: float = 0.8
    engines: tuple[str, ...] = RATIO_ENGINES
    strategies: tuple[str, ...] = RATIO_STRATEGIES
    server_start_s: float = 300.0
    recipe: str | None = None

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
    workload: str = "arith"
    prm_tokens: int = 0
    prompt_tokens_cached: int = 0
    prompt_tokens_computed: int = 0
    policy_s: float = 0.0
    budget: int = 16
    natural_s: float = 0.0
    natural_tokens: int = 0

    @property
    def framework_tok_s(self) -> float:
        return self.framework_tokens / self.framework_s

    @property
    def raw_tok_s(self) -> float:
        return self.raw_tokens / self.raw_s

    @property
    def ratio(self) -> float:
        return self.framework_tok_s / self.raw_tok_s

    @property
    def natural_tok_s(self) -> float:
        """The raw call's tokens/s with samples of their natural lengths (NaN: not measured)."""
        return self.natural_tokens / self.natural_s if self.natural_s > 0 else float("nan")

    @property
    def natural_ratio(self) -> float:
        """Framework tokens/s over the raw call's to EOS (NaN: not measured)."""
        return self.framework_tok_s / self.natural_tok_s

    @property
    def prm_tok_s(self) -> float:
        return self.prm_tokens / self.framework_s

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the policy's prefix cache, over all prompt tokens."""
        total = self.prompt_tokens_cached + self.prompt_tokens_computed
        return self.prompt_tokens_cached / total if total else 0.0

    @property
    def engine_idle_share(self) -> float:
        """Share of the search's wall clock with no policy call running."""
        return max(0.0, 1.0 - self.policy_s / self.framework_s) if self.framework_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "framework_tok_s": self.framework_tok_s, "raw_tok_s": self.raw_tok_s,
                "ratio": self.ratio, "natural_tok_s": self.natural_tok_s,
                "natural_ratio": self.natural_ratio, "prm_tok_s": self.prm_tok_s,
                "prefix_hit_rate": self.prefix_hit_rate, "engine_idle_share": self.engine_idle_share}


@dataclass
class Workload:
    """What one engine-ratio run searches: problems, how a searcher is made, how answers grade.

    ``model`` is the policy folder both engines serve, ``served`` the server's model name,
    ``engine_args`` the offline engine's arguments and ``server_args`` the server's flags.
    """

    label: str
    model: Path
    served: str
    questions: list[str]
    searcher: Callable[[Any, Any, str, int], Any]
    correct: Callable[[list[Any]], int]
    engine_args: dict[str, Any]
    server_args: list[str]
    context_length: int


def arith_workload(cfg: EngineRatioConfig, problems: list | None = None) -> Workload:
    """The embedded policy on ``problems`` (default: the first ``cfg.problems`` arithmetic test
    problems), graded by the arithmetic checker."""
    from prmsearch.api import Searcher
    from prmsearch.arith.checker import check_solution
    from prmsearch.arith.models import default_policy_path
    from prmsearch.arith.problems import load_split
    from prmsearch.search.protocol import strategy_spec

    if problems is None:
        problems = load_split("test", cfg.problems)

    def searcher(policy: Any, scorer: Any, strategy: str, budget: int) -> Any:
        return Searcher(policy, scorer, strategy_spec(strategy).at_budget(budget),
                        sampling=_sampling(cfg.temperature))

    def correct(results: list[Any]) -> int:
        return sum(r.error is None and check_solution(p, list(r.steps)).answer_correct
                   for p, r in zip(problems, results, strict=True))

    work = Workload("arith", default_policy_path(), "arith", [p.question for p in problems],
                    searcher, correct, {"dtype": "float32", "max_model_len": 256},
                    ["--dtype", "float32", "--max-model-len", "256"], 256)
    return work


def recipe_workload(cfg: EngineRatioConfig) -> tuple[Workload, Any]:
    """A real model's recipe: its policy folder, PRM, sampling, strategies and dataset sample."""
    from prmsearch.api import Searcher
    from prmsearch.benchmarks.datasets import load_dataset
    from prmsearch.benchmarks.grading import search_matcher
    from prmsearch.benchmarks.grading.grader import is_equivalent
    from prmsearch.benchmarks.sweeps.recipes import load_recipe

    recipe = load_recipe(str(cfg.recipe))
    sweep = recipe.sweep
    if recipe.policy.backend != "vllm" or not recipe.policy.model:
        raise ValueError(f"recipe {cfg.recipe}: the engine ratio needs a vllm policy with a model "
                         f"folder, got backend {recipe.policy.backend!r}")
    model = Path(recipe.policy.model).expanduser()
    problems = load_dataset(sweep.dataset, sweep.dataset_path, split=sweep.split,
                            limit=cfg.problems, shuffle_seed=sweep.shuffle_seed)
    matcher = search_matcher()

    def searcher(policy: Any, scorer: Any, strategy: str, budget: int) -> Any:
        sampling = replace(sweep.sampling(), temperature=cfg.temperature)  # as the raw call
        return Searcher(policy, scorer, sweep.strategy_at(strategy, budget), sampling=sampling,
                        max_depth=sweep.max_depth, schedule=sweep.schedule, matcher=matcher)

    def correct(results: list[Any]) -> int:
        return sum(r.error is None and is_equivalent(r.answer, p.answer)
                   for p, r in zip(problems, results, strict=True))

    args = dict(recipe.policy.args)
    length = int(args.get("max_model_len", 4096))
    # the server gets the dtype the offline engine resolves (on a CPU without bf16 instructions
    # a bf16 folder runs in float32: vLLM's own "auto" would take the slow bf16 fallback)
    import torch

    from prmsearch.engines.vllm_engine import cpu_dtype

    dtype = args.get("dtype") or ("auto" if torch.cuda.is_available() else cpu_dtype(str(model)))
    server_args = ["--max-model-len", str(length), "--dtype", str(dtype)]
    work = Workload(f"{sweep.dataset} ({model.name})", model, model.name,
                    [p.question for p in problems], searcher, correct, args, server_args, length)
    return work, recipe.build_scorer()




def _raw_offline(policy: Any, prompts: list[list[int]], budget: int, length: int,
                 temperature: float, to_eos: bool = False) -> tuple[float, int]:
    """One ``LLM.generate`` call: every prompt, ``budget`` samples of exactly ``length`` tokens
    (``to_eos``: each sample stops at the policy's EOS tokens, ``length`` at most)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    if to_eos:
        params = [SamplingParams(n=budget, temperature=temperature, max_tokens=length,
                                 stop_token_ids=sorted(policy.eos_ids), seed=0) for _ in prompts]
    else:
        params = [SamplingParams(n=budget, temperature=temperature, max_tokens=length,
                                 min_tokens=length, ignore_eos=True, seed=0) for _ in prompts]
    policy.clear_caches()
    start = time.perf_counter()
    outputs = policy.generate_raw([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    seconds = time.perf_counter() - start
    return seconds, sum(len(c.token_ids) for out in outputs for c in out.outputs)


def _raw_server(base_url: str, prompts: list[list[int]], budget: int, length: int,
                temperature: float, served: str = "arith", to_eos: bool = False) -> tuple[float, int]:
    """One ``/completions`` request with every prompt (token ids), ``n = budget``, fixed length
    (``to_eos``: each sample stops at the model's EOS, ``length`` at most)."""
    import httpx

    root = base_url.rsplit("/v1", 1)[0]
    httpx.post(f"{root}/reset_prefix_cache", timeout=30)  # dev-mode servers only; else ignored
    body = {"model": served, "prompt": prompts, "n": budget, "max_tokens": length,
            "temperature": temperature}
    if not to_eos:
        body.update(min_tokens=length, ignore_eos=True)
    start = time.perf_counter()
    response = httpx.post(f"{base_url}/completions", json=body, timeout=900)
    seconds = time.perf_counter() - start
    response.raise_for_status()
    return seconds, int(response.json()["usage"]["completion_tokens"])


def _open(engine: str, work: Workload, cfg: EngineRatioConfig, log: Log
          ) -> tuple[Any, Callable[[], None], str | None]:
    """The policy of ``engine``, its release function and (for the server) its base URL."""
    if engine == "vllm":
        from prmsearch.policies.vllm import VLLMPolicy

        policy = VLLMPolicy(work.model, **work.engine_args)
        return policy, policy.close, None
    from benchmarks.engines import _Server
    from prmsearch.policies.openai import OpenAIPolicy

    server = _Server(work.model, cfg.server_start_s, log, dev_mode=True, served=work.served,
                     args=work.server_args)
    url = f"http://127.0.0.1:{server.port}/v1"
    policy = OpenAIPolicy(url, work.served, tokenizer=str(work.model), server="vllm",
                          context_length=work.context_length, prompt_as_ids=True, timeout=900.0)

    def release() -> None:
        policy.close()
        server.close()

    return policy, release, url


def measure_engine(engine: str, policy: Any, scorer: Any, problems: list | Workload,
                   cfg: EngineRatioConfig, url: str | None = None, log: Log = print
                   ) -> list[RatioFigures]:
    """Every strategy of ``cfg`` on one open engine: ``policy`` is a `VLLMPolicy` (``url``
    None) or an `OpenAIPolicy` on the vLLM server at ``url``; ``problems`` is a `Workload`,
    or a list of arithmetic problems (searched as :func:`arith_workload` does)."""
    from prmsearch.engines.prompt_formats import PromptBuilder

    work = problems if isinstance(problems, Workload) else arith_workload(cfg, problems)
    questions = work.questions
    builder = PromptBuilder(policy.prompt_format, policy.tokenizer)
    prompts = [builder.ids(q, ()) for q in questions]
    figures: list[RatioFigures] = []
    natural: tuple[float, int] | None = None
    for strategy in cfg.strategies:
        searcher = work.searcher(policy, scorer, strategy, cfg.budget)
        searcher.run(questions[:1])  # warm-up (first-call costs), not measured
        _clear(policy, scorer, url)
        start = time.perf_counter()
        results = searcher.run(questions)
        framework_s = time.perf_counter() - start
        ledger, stats = searcher.last_ledger, searcher.last_stats
        assert ledger is not None and stats is not None
        tokens = ledger.generated_tokens
        length = max(1, round(tokens / (len(prompts) * cfg.budget)))
        if url is None:
            raw_s, raw_tokens = _raw_offline(policy, prompts, cfg.budget, length, cfg.temperature)
        else:
            raw_s, raw_tokens = _raw_server(url, prompts, cfg.budget, length, cfg.temperature,
                                            work.served)
        if natural is None:  # the same for every strategy: once per engine
            # the whole-solution cap of the searches, within the context after the longest prompt
            cap = min(searcher.config.solution_max_tokens,
                      work.context_length - max(len(p) for p in prompts))
            if url is None:
                natural = _raw_offline(policy, prompts, cfg.budget, cap, cfg.temperature, to_eos=True)
            else:
                natural = _raw_server(url, prompts, cfg.budget, cap, cfg.temperature, work.served,
                                      to_eos=True)
        figures.append(RatioFigures(
            engine, strategy, len(questions), framework_s, tokens, raw_s, raw_tokens,
            work.correct(results) / len(questions), work.label, ledger.prm_tokens_computed,
            ledger.prompt_tokens_cached, ledger.prompt_tokens_computed, stats.policy_s, cfg.budget,
            *natural))
        f = figures[-1]
        log(f"engine ratio, {engine} {strategy}: {f.framework_tok_s:,.0f} vs raw "
            f"{f.raw_tok_s:,.0f} tokens/s ({f.ratio:.2f}), raw to EOS {f.natural_tok_s:,.0f} "
            f"({f.natural_ratio:.2f}); PRM {f.prm_tok_s:,.0f} tokens/s, "
            f"prefix hits {f.prefix_hit_rate:.0%}, engine idle {f.engine_idle_share:.0%}")
    return figures


def run_engine_ratio(cfg: EngineRatioConfig, log: Log = print) -> list[RatioFigures]:
    """Every engine and strategy of ``cfg``, one engine at a time (see the module docstring)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if cfg.recipe:
        work, scorer = recipe_workload(cfg)
    else:
        from prmsearch.api import resolve_scorer

        work, scorer = arith_workload(cfg), resolve_scorer(None)  # the shipped PRM
    figures: list[RatioFigures] = []
    for engine in cfg.engines:
        log(f"engine ratio, {engine}: starting ({work.label})")
        policy, release, url = _open(engine, work, cfg, log)
        try:
            figures += measure_engine(engine, policy, scorer, work, cfg, url, log)
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
    rows = ["| engine | strategy | workload | problems | framework tokens/s | raw engine tokens/s | "
            "framework / raw | raw to EOS tokens/s | framework / raw to EOS | generated tokens | "
            "PRM tokens/s | prefix-cache hits | engine idle | accuracy |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in figures:
        rows.append(f"| {f.engine} | {f.strategy} | {f.workload} | {f.problems} | "
                    f"{f.framework_tok_s:,.0f} | {f.raw_tok_s:,.0f} | {f.ratio:.2f} | "
                    f"{f.natural_tok_s:,.0f} | {f.natural_ratio:.2f} | "
                    f"{f.framework_tokens:,} | {f.prm_tok_s:,.0f} | {f.prefix_hit_rate:.0%} | "
                    f"{f.engine_idle_share:.0%} | {f.accuracy:.1%} |")
    return "\n".join(rows)
