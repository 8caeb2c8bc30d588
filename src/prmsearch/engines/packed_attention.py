"""Packed forwards: many sequences end to end in one row, each attending only to itself.

A padded batch runs the model's linear layers on every pad token, and on a CPU its masked
attention cannot use the fused causal kernel. A packed forward lays the sequences' new tokens
end to end in one row of width ``sum(new)``, positions restarting per sequence, and runs each
sequence's attention on its own slice through an attention function registered with
transformers: causal and unmasked where the sequence has no cached prefix, with its cached
prefix keys/values in front (a lower-right causal mask) where it has one. The linear layers
then see no pad token at all (varlen attention, written for the CPU and SDPA).

Works for decoder models whose attention goes through transformers' attention interface
(``model._supports_attention_backend``; Qwen2, Llama, Mistral, Phi, ...).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import torch
from torch.nn.functional import scaled_dot_product_attention

from prmsearch.engines.kv_cache import SeqKV

ATTENTION_NAME = "prmsearch_packed"


@dataclass
class PackedPlan:
    """Where each sequence sits in the packed row, and what it attends to before its slice.

    Attributes:
        lengths: new tokens of each sequence, in row order.
        prefixes: each sequence's cached prefix KV (``None``: no prefix).
        keep_kv: record every layer's new keys/values (to store the sequences' KV after).
        new_kv: layer index -> ``(keys, values)`` of the whole row, ``[heads, width, dim]``.
    """

    lengths: Sequence[int]
    prefixes: Sequence[SeqKV | None]
    keep_kv: bool = False
    new_kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.lengths) != len(self.prefixes):
            raise ValueError(f"{len(self.lengths)} lengths but {len(self.prefixes)} prefixes")
        self.starts = [0, *accumulate(self.lengths)]
        self.width = self.starts.pop()

    def sequence_kv(self, index: int) -> SeqKV:
        """One sequence's whole KV (prefix, then its new tokens), as contiguous tensors."""
        s, m, prefix = self.starts[index], self.lengths[index], self.prefixes[index]
        out = []
        for layer in range(len(self.new_kv)):
            k, v = self.new_kv[layer]
            k, v = k[:, s : s + m], v[:, s : s + m]
            if prefix is not None:
                pk, pv = prefix[layer]
                k, v = torch.cat([pk.to(k.dtype), k], 1), torch.cat([pv.to(v.dtype), v], 1)
            out.append((k.contiguous(), v.contiguous()))
        return tuple(out)


def packed_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None,
                     dropout: float = 0.0, packed_plan: PackedPlan | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The attention function of a packed forward (``query``: ``[1, heads, width, dim]``)."""
    if packed_plan is None:
        raise RuntimeError(
            f"the {ATTENTION_NAME!r} attention runs only inside prmsearch's packed forwards"
        )
    plan = packed_plan
    if query.shape[0] != 1 or query.shape[2] != plan.width:
        raise ValueError(f"packed row of shape {tuple(query.shape)} does not match the plan "
                         f"(1 row of {plan.width} tokens)")
    layer = module.layer_idx
    if plan.keep_kv:
        plan.new_kv[layer] = (key[0], value[0])
    gqa = query.shape[1] != key.shape[1]
    out = query.new_empty((1, plan.width, query.shape[1], query.shape[3]))
    for s, m, prefix in zip(plan.starts, plan.lengths, plan.prefixes):
        q, k, v = query[:, :, s : s + m], key[:, :, s : s + m], value[:, :, s : s + m]
        if prefix is None:
            o = scaled_dot_product_attention(q, k, v, is_causal=m > 1, scale=scaling,
                                             enable_gqa=gqa)
        else:
            pk, pv = prefix[layer]
            c = pk.shape[1]
            k = torch.cat([pk[None].to(k.dtype), k], 2)
            v = torch.cat([pv[None].to(v.dtype), v], 2)
            mask = torch.ones((m, c + m), dtype=torch.bool, device=q.device).tril(c)
            if gqa:  # as transformers does: masked GQA falls back to the math kernel, so expand
                groups = query.shape[1] // key.shape[1]
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            o = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
        out[0, s : s + m] = o[0].transpose(0, 1)
    return out, None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, packed_attention)


def supports_packing(model: Any) -> bool:
    """Whether ``model`` routes its attention through transformers' attention interface."""
    return bool(getattr(model, "_supports_attention_backend", False)) and hasattr(model, "config")


@contextmanager
def packed_attention_on(model: Any) -> Iterator[None]:
    """Switch ``model``'s attention to the packed function for one forward, then back."""
    _register()
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = before
