"""Device, dtype and model/tokenizer loading shared by the transformers policy and scorers.

Defaults: CUDA with bfloat16 when a GPU is visible, CPU with float32 otherwise; both can be
overridden. Models load by Hub id or local folder; remote code stays off unless asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from prmsearch.costs import ModelCost, cost_from_shapes

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks ``cuda`` when available, else ``cpu``."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """``None`` picks bfloat16 on CUDA and float32 elsewhere; strings like ``"bf16"`` are accepted."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise ValueError(
            f"dtype must be one of {sorted(_DTYPES)} or a torch.dtype, got {dtype!r}"
        ) from None


def local_dir(model: str | Path) -> Path | None:
    """The model's folder when ``model`` names a local directory, else None (a Hub id)."""
    path = Path(model)
    return path if path.is_dir() else None


def load_tokenizer(model: str | Path, *, trust_remote_code: bool = False, **kwargs: Any) -> Any:
    """Load the tokenizer of a model folder or Hub id."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model), trust_remote_code=trust_remote_code, **kwargs)


def module_cost(module: torch.nn.Module, config: Any, *, score_head: str | None = None,
                logits_everywhere: bool = False) -> ModelCost:
    """The :class:`~prmsearch.costs.ModelCost` of a loaded model, from its config and its
    parameter names and shapes (the same numbers the checkpoint's safetensors headers give).

    ``score_head``: the attribute name of a PRM's score head (charged per read position).
    ``logits_everywhere``: the output head runs at every token (a scorer that reads token
    probabilities), so it is charged per token with the body.
    """
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    shapes = {name: tuple(p.shape) for name, p in module.named_parameters()}
    cost = cost_from_shapes(cfg, shapes, score_head=score_head)
    if logits_everywhere:
        cost = replace(cost, non_embedding_params=cost.non_embedding_params + cost.head_flops // 2,
                       head_flops=0)
    return cost


def count_parameters(module: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def is_oom(err: BaseException) -> bool:
    """True for an accelerator out-of-memory error (caught to retry with a smaller batch)."""
    return isinstance(err, torch.OutOfMemoryError)


def free_accelerator_memory(device: torch.device) -> None:
    """Release cached allocator blocks after an out-of-memory error."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' per-load progress bars and key reports while loading weights.

    The library prints a bar per checkpoint and lists head keys it does not know (the PRM heads,
    which this project loads itself) as "unexpected"; both are noise in a search CLI.
    """
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
        if bars:
            hf_logging.enable_progress_bar()
