"""Loading the policy and the PRM at the same time where that saves minutes.

On a CPU, a vLLM engine's start is mostly single-threaded work in processes of its own (each
engine process and its worker import torch and vLLM again, then read the weights), so two engines
started one after the other leave a core idle for a minute or more; started together they take
about the time of the slower one. On a GPU the engines are built one after the other, as before:
vLLM sizes each engine's memory from what the device has free when it starts, so a second engine
must start after the first has taken its share.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from prmsearch.engines.memory_fit import GPU_TOTAL_SHARE, gpu_memory_shares, model_memory
from prmsearch.engines.vllm_engine import model_folder, on_gpu, read_config

log = logging.getLogger("prmsearch.engines")

A = TypeVar("A")
B = TypeVar("B")


def start_together(policy_backend: str | None, prm_backend: str | None) -> bool:
    """Whether a policy and a PRM on these backends load at the same time: where one of them is a
    vLLM engine (whose start is minutes of mostly single-threaded work) and no CUDA device is
    visible (vLLM brings torch, so the check imports nothing that the load would not)."""
    return "vllm" in (policy_backend, prm_backend) and not on_gpu()


#: The engine argument that sets an engine's share of a GPU.
GPU_SHARE = "gpu_memory_utilization"


def share_one_gpu(policy_backend: str | None, prm_backend: str | None, policy_model: str | None,
                  prm_model: str | None, policy_args: Mapping[str, Any], prm_args: Mapping[str, Any],
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The policy's and the PRM's backend arguments, with the GPU split between them where both
    are vLLM engines on one device: vLLM would give each 0.9 of the device, and the second would
    not start. Where neither names its share (``gpu_memory_utilization``) the split is
    :func:`~prmsearch.engines.memory_fit.gpu_memory_shares` (one log line says what it is); where
    one does, the other gets the rest of 0.9."""
    policy_args, prm_args = dict(policy_args), dict(prm_args)
    both_given = GPU_SHARE in policy_args and GPU_SHARE in prm_args
    if (policy_backend, prm_backend) != ("vllm", "vllm") or both_given or not on_gpu():
        return policy_args, prm_args
    for given, other in ((policy_args, prm_args), (prm_args, policy_args)):
        if GPU_SHARE in given:  # one share named: the other engine gets the rest
            rest = round(GPU_TOTAL_SHARE - float(given[GPU_SHARE]), 3)
            if rest > 0:
                other[GPU_SHARE] = rest
            return policy_args, prm_args
    policy_folder = model_folder(policy_model) if policy_model else None
    prm_folder = model_folder(prm_model) if prm_model else None
    if policy_folder is None or prm_folder is None:
        return policy_args, prm_args
    import torch

    total = int(torch.cuda.mem_get_info()[1])
    policy = model_memory(policy_folder, _gpu_dtype(policy_folder, policy_args),
                          policy_args.get("max_model_len"))
    prm = model_memory(prm_folder, _gpu_dtype(prm_folder, prm_args), prm_args.get("max_model_len"))
    policy_share, prm_share = gpu_memory_shares(total, policy, prm)
    log.info("one GPU for two vLLM engines: gpu_memory_utilization %.3f for the policy, %.3f for the PRM "
             "(set either with --policy-arg/--prm-arg gpu_memory_utilization=...)", policy_share, prm_share)
    return {**policy_args, GPU_SHARE: policy_share}, {**prm_args, GPU_SHARE: prm_share}


def _gpu_dtype(folder: Any, args: Mapping[str, Any]) -> str:
    """The dtype an engine runs a folder in on a GPU: as given, else the folder's own."""
    config = read_config(folder)
    return str(args.get("dtype") or config.get("dtype") or config.get("torch_dtype") or "bfloat16")


#: Names whose first use imports a submodule of a lazily importing package; resolved once, in one
#: thread, before two loads start (two threads resolving the same lazy name at once can see the
#: submodule half imported: ``cannot import name 'AutoTokenizer' from 'transformers'``).
LAZY_NAMES = {
    "transformers": ("AutoConfig", "AutoTokenizer", "PreTrainedTokenizerBase", "AutoModelForCausalLM",
                     "AutoModelForTokenClassification", "AutoModel"),
    "vllm": ("LLM", "SamplingParams"),
}


def resolve_lazy_imports() -> None:
    """Import the packages of `LAZY_NAMES` (those installed) and resolve their lazy names here."""
    for package, names in LAZY_NAMES.items():
        if importlib.util.find_spec(package) is None:
            continue
        module = importlib.import_module(package)
        for name in names:
            with contextlib.suppress(Exception):  # a name this version lacks is not needed here
                getattr(module, name)


def close_quietly(backend: object) -> None:
    """Release ``backend``'s engine (its ``close()``, where it has one), ignoring any error: it is
    called while another error is on its way to the caller."""
    close = getattr(backend, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):  # the caller's own error is the one to report
            close()


def load_together(first: Callable[[], A], second: Callable[[], B], *, concurrent: bool) -> tuple[A, B]:
    """``(first(), second())``, the two run in two threads when ``concurrent`` (see
    `start_together`), after the lazy names of transformers and vLLM are resolved in this thread.

    Errors are those of the sequential order: when ``first`` fails its error is raised (and a
    loaded second backend is closed); when only ``second`` fails, the first backend is closed and
    ``second``'s error raised, so no engine process outlives a failed load.
    """
    if not concurrent:
        one = first()
        try:
            return one, second()
        except BaseException:
            close_quietly(one)
            raise
    resolve_lazy_imports()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="prmsearch-load") as pool:
        first_future, second_future = pool.submit(first), pool.submit(second)
        first_error, second_error = first_future.exception(), second_future.exception()
    if first_error is not None:
        if second_error is None:
            close_quietly(second_future.result())
        raise first_error
    if second_error is not None:
        close_quietly(first_future.result())
        raise second_error
    return first_future.result(), second_future.result()


def close_together(*backends: object) -> None:
    """Close ``backends`` at the same time, each once (one object may be both the policy and the
    scorer); each vLLM engine's shutdown waits up to `ENGINE_STOP_GRACE_S` for its processes to
    stop."""
    unique = {id(b): b for b in backends}.values()
    closable = [b for b in unique if callable(getattr(b, "close", None))]
    with ThreadPoolExecutor(max_workers=max(1, len(closable)), thread_name_prefix="prmsearch-close") as pool:
        list(pool.map(close_quietly, closable))
