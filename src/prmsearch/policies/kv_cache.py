"""Key/value tensors of token prefixes: a bounded LRU store and batch (un)packing helpers.

Both the transformers policy and the transformers PRM scorer run causal models over many
sequences that share prefixes (a node's path extends its parent's). Keeping the attention
keys/values of recently seen token prefixes lets a forward pass compute only the new tokens.

Layout used everywhere here: one sequence's KV is a tuple over layers of ``(keys, values)``
with shape ``[heads, length, head_dim]`` (no batch dimension). A batch cache packs rows
right-aligned into ``[batch, heads, width, head_dim]`` with zero padding on the left; the
caller's attention mask hides the padding.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

LayerKV = tuple[torch.Tensor, torch.Tensor]
SeqKV = tuple[LayerKV, ...]


def token_key(ids: Sequence[int] | np.ndarray) -> bytes:
    """A compact, collision-resistant key for a token id sequence (blake2b of int64 bytes)."""
    arr = np.asarray(ids, dtype=np.int64)
    return hashlib.blake2b(arr.tobytes(), digest_size=16).digest()


def prefix_digests(ids: Sequence[int] | np.ndarray, ends: Sequence[int]) -> list[bytes]:
    """``token_key(ids[:e])`` for every ``e`` in ascending ``ends``, hashing each token once."""
    arr = np.asarray(ids, dtype=np.int64)
    h = hashlib.blake2b(digest_size=16)
    out: list[bytes] = []
    prev = 0
    for e in ends:
        if e < prev:
            raise ValueError(f"ends must be ascending, got {list(ends)}")
        h.update(arr[prev:e].tobytes())
        prev = e
        out.append(h.copy().digest())
    return out


def check_plain_cache(cache: DynamicCache) -> None:
    """Raise when a cache holds layers this module cannot slice (sliding windows, states)."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"KV layer {i} is a {type(layer).__name__}; prefix reuse supports full-attention "
                "DynamicLayer caches only. Pass prefix_cache_tokens=0 to disable prefix reuse."
            )


def pack_rows(rows: Sequence[SeqKV | None], width: int, like: SeqKV | None = None) -> DynamicCache:
    """Build a batch ``DynamicCache`` of ``width`` columns from per-row KV (right-aligned).

    Rows given as ``None`` (or with fewer than ``width`` tokens) are zero on the left; the
    attention mask must hide those columns. ``like`` supplies shapes when every row is None.
    Returns an empty cache when ``width`` is 0.
    """
    if width == 0:
        return DynamicCache()
    ref = like if like is not None else next(r for r in rows if r is not None)
    layers = []
    for li, (k_ref, v_ref) in enumerate(ref):
        heads, _, kdim = k_ref.shape
        vdim = v_ref.shape[-1]
        keys = k_ref.new_zeros((len(rows), heads, width, kdim))
        values = v_ref.new_zeros((len(rows), heads, width, vdim))
        for b, row in enumerate(rows):
            if row is None:
                continue
            k, v = row[li]
            n = k.shape[1]
            if n:
                keys[b, :, width - n :] = k.to(keys.device, keys.dtype)
                values[b, :, width - n :] = v.to(values.device, values.dtype)
        layers.append((keys, values))
    return DynamicCache(ddp_cache_data=layers)


def row_kv(cache: DynamicCache, row: int, columns: torch.Tensor) -> SeqKV:
    """Copy one row's KV at the given cache columns (a 1-D index tensor), as contiguous tensors."""
    out = []
    for layer in cache.layers:
        out.append(
            (
                layer.keys[row].index_select(1, columns).contiguous(),
                layer.values[row].index_select(1, columns).contiguous(),
            )
        )
    return tuple(out)


def seq_len(kv: SeqKV) -> int:
    """Number of tokens held by one sequence's KV."""
    return int(kv[0][0].shape[1]) if kv else 0


def truncate(kv: SeqKV, length: int) -> SeqKV:
    """The first ``length`` tokens of a sequence's KV (views, no copy)."""
    return tuple((k[:, :length], v[:, :length]) for k, v in kv)


@dataclass
class _Entry:
    ids: tuple[int, ...]
    kv: SeqKV


class PrefixKVCache:
    """LRU store of token-prefix KV, bounded by the total number of tokens it holds.

    ``lookup(ids)`` returns the longest stored sequence that is a prefix of ``ids``. Entries
    are whole sequences (a child's entry repeats its parent's tokens): simple and exact, at
    the price of some memory, which the token bound keeps in check. A bound of 0 disables it.
    """

    def __init__(self, max_tokens: int, device: torch.device | str | None = None) -> None:
        if not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.device = torch.device(device) if device is not None else None
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lengths: dict[int, int] = {}  # stored length -> number of entries of that length
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._lengths.clear()
        self.tokens = 0

    def lookup(self, ids: Sequence[int], max_len: int | None = None) -> tuple[int, SeqKV | None]:
        """Return ``(n, kv)`` for the longest stored prefix of ``ids`` of at most ``max_len`` tokens.

        When the stored entry is longer than ``max_len`` (an exact hit, but the caller needs the
        last token's output) it is truncated. ``(0, None)`` on a miss.
        """
        if not self._entries:
            return 0, None
        limit = len(ids) if max_len is None else min(max_len, len(ids))
        arr = np.asarray(ids, dtype=np.int64)
        for length in sorted(self._lengths, reverse=True):
            if length > len(ids):
                continue
            key = token_key(arr[:length])
            entry = self._entries.get(key)
            if entry is None or entry.ids != tuple(ids[:length]):
                continue
            self._entries.move_to_end(key)
            use = min(length, limit)
            if use <= 0:
                return 0, None
            return use, truncate(entry.kv, use)
        return 0, None

    def store(self, ids: Sequence[int], kv: SeqKV) -> None:
        """Insert (or refresh) the KV of ``ids``, evicting least recently used entries."""
        n = len(ids)
        if self.max_tokens == 0 or n == 0 or n > self.max_tokens:
            return
        if seq_len(kv) != n:
            raise ValueError(f"KV holds {seq_len(kv)} tokens but {n} ids were given")
        key = token_key(ids)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        if self.device is not None:
            kv = tuple((k.to(self.device), v.to(self.device)) for k, v in kv)
        self._entries[key] = _Entry(tuple(int(i) for i in ids), kv)
        self._lengths[n] = self._lengths.get(n, 0) + 1
        self.tokens += n
        while self.tokens > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            m = len(old.ids)
            self.tokens -= m
            self._lengths[m] -= 1
            if not self._lengths[m]:
                del self._lengths[m]
