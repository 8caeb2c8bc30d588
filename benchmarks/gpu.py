"""Throughput of the transformers backends at real model sizes, against hardware rooflines.

On one GPU, with models of the architecture and size of Qwen2.5-Math-1.5B
(policy) and Qwen2.5-Math-PRM-7B (PRM) built in place with random weights, measure

* PRM scoring tokens/s through :class:`~prmsearch.scorers.hf.HFPRMScorer` at several
  ``max_batch_tokens`` budgets, against the compute roofline ``peak FLOP/s / (2 x parameters)``
  (the ledger's FLOP convention: every parameter, embeddings included, attention FLOPs left out);
* policy decode tokens/s through :class:`~prmsearch.policies.hf.HFPolicy` at several batch sizes,
  against the memory-bandwidth roofline: each decode step must read the weights once plus the
  KV cache of every row, so ``tokens/s <= batch x bandwidth / (weight bytes + batch x context x
  KV bytes per token)``. Decode time is isolated by running the same requests with two token
  limits and dividing the extra tokens by the extra time (prefill and set-up cancel out).

Inputs are synthetic: the byte-level tokenizer of :mod:`benchmarks.backend_bench` (261 ids,
all below the models' vocabulary) turns random lexicon text into token ids, one per character,
so prompt and step lengths are exact. The backends tokenise and format exactly as in a search
(the PRM's chat layout with ``<extra_0>`` separators, the policy's plain prompt). The policy
samples over its whole random vocabulary; ids beyond the tokenizer decode to nothing, which
changes only the returned text, not the computation. Requests run as whole solutions
(``stop_at_step=False``), so every row decodes to the token limit unless it samples EOS.

Every measurement runs in its own ``try``: one failure (an out-of-memory, say) is reported and
the others still run. CUDA is synchronised around every timing; the models are warmed up once.

Why one module over 500 lines: the two measurements share the model building, the timing and
the roofline arithmetic, and run together in one GPU call; split, each half would import the other.
"""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from benchmarks.synthetic_models import (
    Log,
    ModelShape,
    TextMaker,
    bench_tokenizer,
    build_policy_model,
    build_prm_model,
    quiet_log,
)
from prmsearch.policies.base import GenerationRequest, SamplingParams
from prmsearch.scorers.base import ScoreRequest

__all__ = [
    "H200",
    "QWEN25_MATH_1_5B",
    "QWEN25_MATH_PRM_7B",
    "GpuBenchConfig",
    "GpuReport",
    "Hardware",
    "Measurement",
    "run_gpu_bench",
]

#: Qwen2.5-Math-1.5B: Qwen2ForCausalLM, tied embeddings (about 1.54e9 parameters).
QWEN25_MATH_1_5B = ModelShape(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960,
                              vocab=151936, tie_embeddings=True)
#: Qwen2.5-Math-PRM-7B: Qwen2 base without LM head, plus the 2-logit PRM head (about 7.07e9).
QWEN25_MATH_PRM_7B = ModelShape(hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944,
                                vocab=152064)


@dataclass(frozen=True)
class Hardware:
    """The accelerator's peaks used for the rooflines.

    Attributes:
        name: for the report.
        peak_tflops: dense bf16 tensor throughput, TFLOP/s.
        bandwidth_tbs: memory bandwidth, TB/s (1e12 bytes/s).
    """

    name: str
    peak_tflops: float
    bandwidth_tbs: float

    def __post_init__(self) -> None:
        if not self.peak_tflops > 0:
            raise ValueError(f"peak_tflops must be > 0, got {self.peak_tflops}")
        if not self.bandwidth_tbs > 0:
            raise ValueError(f"bandwidth_tbs must be > 0, got {self.bandwidth_tbs}")


#: NVIDIA H200 SXM: 989 TFLOP/s dense bf16, 4.8 TB/s HBM3e.
H200 = Hardware("H200 SXM", peak_tflops=989.0, bandwidth_tbs=4.8)


@dataclass(frozen=True)
class GpuBenchConfig:
    """What the GPU benchmark builds and measures.

    Attributes:
        policy: policy model shape.
        prm: PRM model shape.
        hardware: peaks for the rooflines.
        device: ``None`` = CUDA when available, else CPU.
        dtype: ``None`` = bfloat16 on CUDA, float32 on CPU.
        prm_budgets: ``max_batch_tokens`` values to measure PRM scoring at.
        prm_requests: step sequences scored at each budget (the same ones each time).
        prm_steps: (min, max) steps per sequence.
        step_chars: (min, max) characters (= tokens) per step.
        question_chars: characters per question.
        decode_batches: decode batch sizes (rows) to measure.
        samples_per_prompt: rows sharing one prompt (``n`` of a request).
        prompt_chars: characters per policy prompt.
        warm_tokens: token limit of the short run (its time is subtracted).
        decode_tokens: extra tokens of the long run (the measured decode steps).
        seed: seeds weights and texts.
    """

    policy: ModelShape = QWEN25_MATH_1_5B
    prm: ModelShape = QWEN25_MATH_PRM_7B
    hardware: Hardware = H200
    device: str | None = None
    dtype: str | None = None
    prm_budgets: tuple[int, ...] = (8192, 16384, 32768, 65536)
    prm_requests: int = 256
    prm_steps: tuple[int, int] = (2, 8)
    step_chars: tuple[int, int] = (60, 160)
    question_chars: int = 200
    decode_batches: tuple[int, ...] = (64, 256)
    samples_per_prompt: int = 8
    prompt_chars: int = 512
    warm_tokens: int = 16
    decode_tokens: int = 128
    seed: int = 0
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("prm_requests", "samples_per_prompt", "prompt_chars", "question_chars",
                     "warm_tokens", "decode_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("prm_budgets", "decode_batches"):
            values = getattr(self, name)
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"{name} must be a non-empty tuple of ints >= 1, got {values!r}")
        for name in ("prm_steps", "step_chars"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"{name} must be (min, max) with 1 <= min <= max, got {(low, high)}")

    @classmethod
    def small(cls) -> GpuBenchConfig:
        """Tiny shapes that run on a CPU in seconds (for CI; the ratios mean nothing there)."""
        return cls(
            policy=ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=512,
                              tie_embeddings=True),
            prm=ModelShape(hidden=96, layers=2, heads=4, kv_heads=2, intermediate=192, vocab=512),
            prm_budgets=(512, 1024, 2048, 4096),
            prm_requests=32,
            prm_steps=(1, 4),
            step_chars=(20, 60),
            question_chars=80,
            decode_batches=(4, 16),
            samples_per_prompt=4,
            prompt_chars=64,
            warm_tokens=4,
            decode_tokens=16,
            notes=("--small: tiny models; the rooflines are the GPU's, the ratios mean nothing here",),
        )


@dataclass(frozen=True)
class Measurement:
    """One throughput figure and its roofline (``error`` set when it failed)."""

    name: str
    measured_tps: float | None = None
    roofline_tps: float | None = None
    tokens: int = 0
    seconds: float = 0.0
    detail: str = ""
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """Measured / roofline."""
        if self.measured_tps is None or not self.roofline_tps:
            return None
        return self.measured_tps / self.roofline_tps


@dataclass(frozen=True)
class GpuReport:
    """Everything one run measured, with the assumptions behind the rooflines."""

    environment: dict[str, Any]
    assumptions: list[str]
    measurements: list[Measurement]

    def table(self) -> str:
        """One table of all measurements, then the assumptions."""
        lines = ["| measurement | tokens/s | roofline tokens/s | measured/roofline | detail |",
                 "|---|---|---|---|---|"]
        for m in self.measurements:
            if m.error is not None:
                lines.append(f"| {m.name} | FAILED | {_fmt(m.roofline_tps)} | - | {m.error} |")
                continue
            ratio = m.ratio
            lines.append(f"| {m.name} | {_fmt(m.measured_tps)} | {_fmt(m.roofline_tps)} | "
                         f"{'-' if ratio is None else f'{100 * ratio:.1f}%'} | {m.detail} |")
        env = ", ".join(f"{k}={v}" for k, v in self.environment.items())
        return "\n".join([*lines, "", f"Environment: {env}", *self.assumptions])

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (ratios included)."""
        return {
            "environment": self.environment,
            "assumptions": self.assumptions,
            "measurements": [{**asdict(m), "ratio": m.ratio} for m in self.measurements],
        }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


# ------------------------------------------------------------------------------- rooflines
def prm_roofline(parameters: int, hw: Hardware) -> float:
    """Tokens/s at peak compute with ``2 x parameters`` FLOPs per token."""
    return hw.peak_tflops * 1e12 / (2 * parameters)


def exact_flops_per_token(shape: ModelShape, parameters: int, mean_context: float) -> float:
    """FLOPs a token really costs: matmuls over every parameter but the embedding table (a
    lookup), plus attention scores and values (``4 x layers x hidden x`` keys attended)."""
    matmul = 2 * (parameters - shape.vocab * shape.hidden)
    return matmul + 4 * shape.layers * shape.heads * shape.head_dim * mean_context


def kv_bytes_per_token(shape: ModelShape, element_bytes: int) -> int:
    """Bytes of keys and values one token holds in the cache (all layers)."""
    return shape.layers * 2 * shape.kv_heads * shape.head_dim * element_bytes


def decode_roofline(weight_bytes: int, kv_per_token: int, batch: int, context: float,
                    hw: Hardware) -> float:
    """Tokens/s when each decode step reads the weights once and every row's KV once."""
    step_bytes = weight_bytes + batch * context * kv_per_token
    return batch * hw.bandwidth_tbs * 1e12 / step_bytes


# ---------------------------------------------------------------------------- machinery
class _Clock:
    """Wall-clock timing with the device synchronised before and after."""

    def __init__(self, device: Any) -> None:
        self.device = device

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        self.sync()
        start = time.perf_counter()
        out = fn()
        self.sync()
        return out, time.perf_counter() - start


@contextmanager
def building(device: Any, dtype: Any) -> Iterator[None]:
    """Create tensors directly on ``device`` in ``dtype`` (fast init of large random models)."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def free_device_memory(device: Any) -> None:
    """Drop what is unreachable and hand cached device memory back."""
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _peak_gb(device: Any) -> str:
    import torch

    if device.type != "cuda":
        return ""
    return f", peak {torch.cuda.max_memory_allocated(device) / 1e9:.1f} GB"


def _reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def error_message(err: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}"[:limit]


def _attempt(name: str, log: Log, fn: Callable[[], Measurement], device: Any) -> Measurement:
    """Run one measurement; a failure becomes a Measurement with ``error`` set."""
    log(f"{name} ...")
    try:
        result = fn()
    except Exception as err:  # one failure must not stop the other measurements
        free_device_memory(device)
        message = error_message(err)
        log(f"{name} FAILED: {message}")
        return Measurement(name, error=message)
    ratio = result.ratio
    log(f"{name}: {_fmt(result.measured_tps)} tokens/s"
        + ("" if ratio is None else f" ({100 * ratio:.1f}% of roofline)"))
    return result


# ------------------------------------------------------------------------------ the PRM
def prm_requests(cfg: GpuBenchConfig, rng: np.random.Generator) -> list[ScoreRequest]:
    """Synthetic step sequences: 16 questions, ``prm_steps`` steps of ``step_chars`` each."""
    texts = TextMaker(rng)
    questions = [texts.chars(cfg.question_chars).strip() + "?" for _ in range(16)]
    out = []
    for k in range(cfg.prm_requests):
        count = int(rng.integers(cfg.prm_steps[0], cfg.prm_steps[1] + 1))
        steps = tuple(
            texts.chars(int(rng.integers(cfg.step_chars[0], cfg.step_chars[1] + 1))).strip() + "."
            for _ in range(count)
        )
        out.append(ScoreRequest(questions[k % len(questions)], steps))
    return out


def measure_prm(cfg: GpuBenchConfig, tok: Any, device: Any, dtype: Any, log: Log) -> list[Measurement]:
    """Build the PRM, warm it up, and measure scoring at every budget."""
    from prmsearch.engines.loading import count_parameters
    from prmsearch.scorers.hf import HFPRMScorer

    clock = _Clock(device)
    log(f"building the PRM ({cfg.prm.layers} layers, hidden {cfg.prm.hidden}) on {device}")
    (prm, build_s) = clock.time(lambda: _build(build_prm_model, cfg.prm, tok, cfg.seed + 1, device, dtype))
    params = count_parameters(prm)
    roofline = prm_roofline(params, cfg.hardware)
    log(f"PRM: {params:,} parameters, built in {build_s:.1f} s; roofline {roofline:,.0f} tokens/s")
    requests = prm_requests(cfg, np.random.default_rng(cfg.seed))
    lengths = _encoded_lengths(tok, requests)
    attended = float((lengths * (lengths + 1) / 2).sum() / lengths.sum())  # mean keys per query
    exact = cfg.hardware.peak_tflops * 1e12 / exact_flops_per_token(cfg.prm, params, attended)

    def scorer(budget: int) -> Any:
        return HFPRMScorer.from_model(prm, tok, "qwen-prm", max_batch_tokens=budget,
                                      prefix_cache_tokens=0, score_cache_entries=0)

    clock.time(lambda: scorer(cfg.prm_budgets[0]).score(requests[:8]))  # warm-up
    out = []
    for budget in cfg.prm_budgets:

        def one(budget: int = budget) -> Measurement:
            s = scorer(budget)
            _reset_peak(device)
            results, seconds = clock.time(lambda: s.score(requests))
            tokens = sum(r.tokens_computed for r in results)
            scores = np.concatenate([r.scores for r in results])
            if not np.all(np.isfinite(scores)):
                raise FloatingPointError("the PRM returned non-finite scores")
            detail = (f"{len(requests)} sequences, {tokens:,} tokens in {seconds:.2f} s, "
                      f"mean {tokens / len(requests):.0f} tokens, exact-FLOP roofline {exact:,.0f}"
                      f"{_peak_gb(device)}")
            return Measurement(f"PRM scoring, max_batch_tokens {budget:,}", tokens / seconds, roofline,
                               tokens, seconds, detail)

        out.append(_attempt(f"PRM scoring, max_batch_tokens {budget:,}", log, one, device))
    return out


def _encoded_lengths(tok: Any, requests: list[ScoreRequest]) -> np.ndarray:
    """Tokens the qwen-prm format feeds the model per request (up to the last step's separator)."""
    from prmsearch.scorers.formats import make_format

    fmt = make_format("qwen-prm", tok)
    return np.array([fmt.encode(r.question, r.steps).positions[-1] + 1 for r in requests], dtype=float)


def _build(builder: Callable[..., Any], shape: ModelShape, tok: Any, seed: int, device: Any,
           dtype: Any) -> Any:
    with building(device, dtype):
        return builder(shape, tok, seed=seed)


# --------------------------------------------------------------------------- the policy
def measure_decode(cfg: GpuBenchConfig, tok: Any, device: Any, dtype: Any, log: Log) -> list[Measurement]:
    """Build the policy, warm it up, and measure decode at every batch size."""
    from prmsearch.engines.loading import count_parameters
    from prmsearch.policies.hf import HFPolicy

    clock = _Clock(device)
    log(f"building the policy ({cfg.policy.layers} layers, hidden {cfg.policy.hidden}) on {device}")
    model, build_s = clock.time(lambda: _build(build_policy_model, cfg.policy, tok, cfg.seed, device, dtype))
    params = count_parameters(model)
    element = model.get_output_embeddings().weight.element_size()
    weight_bytes = params * element
    kv_token = kv_bytes_per_token(cfg.policy, element)
    log(f"policy: {params:,} parameters ({weight_bytes / 1e9:.3f} GB), built in {build_s:.1f} s; "
        f"KV {kv_token / 1e3:.1f} kB per token")
    texts = TextMaker(np.random.default_rng(cfg.seed + 2))
    longest = cfg.warm_tokens + cfg.decode_tokens

    def run(policy: Any, batch: int, tokens: int) -> tuple[int, float]:
        n = min(batch, cfg.samples_per_prompt)
        prompts = [texts.chars(cfg.prompt_chars) for _ in range(max(1, batch // n))]
        sampling = SamplingParams(temperature=1.0, max_new_tokens=tokens)
        requests = [GenerationRequest(p, (), n, sampling, seed=i, stop_at_step=False)
                    for i, p in enumerate(prompts)]
        gens, seconds = clock.time(lambda: policy.generate(requests))
        return sum(g.tokens_generated for g in gens), seconds

    def policy_for(batch: int) -> Any:
        budget = batch * (cfg.prompt_chars + 8 + longest)
        return HFPolicy.from_model(model, tok, prompt_format="plain", max_batch_tokens=budget,
                                   prefix_cache_tokens=0)

    run(policy_for(8), 8, 4)  # warm-up
    prompt_len = len(policy_for(1).prompt_ids(texts.chars(cfg.prompt_chars), ()))
    context = prompt_len + cfg.warm_tokens + cfg.decode_tokens / 2
    out = []
    for batch in cfg.decode_batches:
        roofline = decode_roofline(weight_bytes, kv_token, batch, context, cfg.hardware)

        def one(batch: int = batch, roofline: float = roofline) -> Measurement:
            policy = policy_for(batch)
            _reset_peak(device)
            short_tokens, short_s = run(policy, batch, cfg.warm_tokens)
            long_tokens, long_s = run(policy, batch, longest)
            tokens, seconds = long_tokens - short_tokens, long_s - short_s
            if tokens <= 0 or seconds <= 0:
                raise RuntimeError(f"no decode time isolated ({tokens} tokens, {seconds:.3f} s)")
            step_ms = 1e3 * seconds * batch / tokens
            kv_gb = batch * context * kv_token / 1e9
            detail = (f"{tokens:,} tokens in {seconds:.2f} s, {step_ms:.1f} ms/step, prompt {prompt_len}, "
                      f"mean context {context:.0f}, bytes/step {weight_bytes / 1e9:.2f} GB weights + "
                      f"{kv_gb:.2f} GB KV{_peak_gb(device)}")
            return Measurement(f"policy decode, batch {batch}", tokens / seconds, roofline, tokens,
                               seconds, detail)

        out.append(_attempt(f"policy decode, batch {batch}", log, one, device))
    return out


# ----------------------------------------------------------------------------------- run
def environment(device: Any, dtype: Any) -> dict[str, Any]:
    """Versions and device, for the report."""
    import torch
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"device": name, "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def assumptions(cfg: GpuBenchConfig) -> list[str]:
    """How the rooflines are computed, in words."""
    hw = cfg.hardware
    return [
        f"PRM roofline = {hw.peak_tflops:g} TFLOP/s ({hw.name} dense bf16) / (2 x parameters) FLOPs "
        "per token, the ledger's convention (the embedding table counted, attention FLOPs not). "
        "The 'exact-FLOP roofline' in the detail counts what is computed: matmuls without the "
        "embedding lookup, plus attention at the requests' mean causal context. For scale: "
        "about 57k tokens/s is quoted for the 7B PRM.",
        f"Decode roofline = batch x {hw.bandwidth_tbs:g} TB/s / (weight bytes + batch x mean context "
        "x KV bytes per token): one read of the weights and of every row's KV per step; the "
        "sampling, the mask update and dropping finished rows are extra traffic the roofline does "
        "not allow for (new KV is written in place, not concatenated).",
        "Decode tokens/s = (tokens of a long run - tokens of a short run) / (time difference): "
        "the same requests with two token limits, so prefill and set-up cancel out.",
        "PRM tokens/s counts real (unpadded) tokens; padding inside a batch is a cost, not a credit.",
        *cfg.notes,
    ]


def run_gpu_bench(cfg: GpuBenchConfig, log: Log = quiet_log) -> GpuReport:
    """Measure PRM scoring at each budget, then policy decode at each batch size."""
    from prmsearch.engines.loading import resolve_device, resolve_dtype

    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    tok = bench_tokenizer()
    measurements: list[Measurement] = []
    for part in (measure_prm, measure_decode):
        try:
            measurements += part(cfg, tok, device, dtype, log)
        except Exception as err:  # a model that cannot be built: report, go on
            message = error_message(err)
            log(f"{part.__name__} FAILED: {message}")
            measurements.append(Measurement(part.__name__, error=message))
        free_device_memory(device)  # the part's model is unreachable now
    return GpuReport(environment(device, dtype), assumptions(cfg), measurements)
