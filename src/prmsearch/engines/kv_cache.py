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

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from prmsearch.engines.token_keys import token_key

LayerKV = tuple[torch.Tensor, torch.Tensor]
SeqKV = tuple[LayerKV, ...]


class _FilledLayer(Protocol):
    """A full-attention cache layer holding its keys and values: what this module's caches hold
    (`check_plain_cache`; transformers types a layer's tensors as None until it is filled)."""

    keys: torch.Tensor
    values: torch.Tensor


def check_plain_cache(cache: DynamicCache) -> None:
    """Raise when a cache holds layers this module cannot slice (sliding windows, states)."""
    for i, layer in enumerate(cache.layers):
        if type(layer) not in (DynamicLayer, AppendLayer):
            raise NotImplementedError(
                f"KV layer {i} is a {type(layer).__name__}; prefix reuse supports full-attention "
                "DynamicLayer caches only. Pass prefix_cache_tokens=0 to disable prefix reuse."
            )


def pack_rows(rows: Sequence[SeqKV | None], width: int, like: SeqKV | None = None,
              room: int = 0) -> DynamicCache:
    """Build a batch cache of ``width`` columns from per-row KV (right-aligned).

    Rows given as ``None`` (or with fewer than ``width`` tokens) are zero on the left; the
    attention mask must hide those columns. ``like`` supplies shapes when every row is None.
    ``room`` spare columns let the next forward append its ``room`` new tokens in place (see
    :class:`AppendLayer`). Returns an empty ``DynamicCache`` when ``width`` is 0.
    """
    if width == 0:
        return DynamicCache()
    ref = like if like is not None else next(r for r in rows if r is not None)
    layers = []
    for li, (k_ref, v_ref) in enumerate(ref):
        heads, _, kdim = k_ref.shape
        vdim = v_ref.shape[-1]
        keys = k_ref.new_empty((len(rows), heads, width + room, kdim))
        values = v_ref.new_empty((len(rows), heads, width + room, vdim))
        keys[:, :, :width].zero_()  # padding must be finite (masked, but 0 x NaN is NaN)
        values[:, :, :width].zero_()
        for b, row in enumerate(rows):
            if row is None:
                continue
            k, v = row[li]
            n = k.shape[1]
            if n:
                keys[b, :, width - n : width] = k.to(keys.device, keys.dtype)
                values[b, :, width - n : width] = v.to(values.device, values.dtype)
        layers.append(AppendLayer(keys, values, width))
    return _cache_of(layers)


class AppendLayer(DynamicLayer):
    """A full-attention KV layer that appends in place into preallocated room.

    ``DynamicLayer.update`` concatenates, so every forward copies the whole cache: a decode of
    ``T`` tokens moves O(T^2) KV through memory. On a CPU with a large decode batch that copy is
    memory-bound (about a fifth of a batched beam search on the embedded models). This layer
    writes new columns into spare room and gives attention views of the filled part (the same
    values and shapes, so the same results); out of room, it reallocates with double room.
    Room that is never written is never touched (on a CPU, never even paged in).

    Only what the backends use is supported: ``update``, ``batch_select_indices`` and the
    ``DynamicLayer`` readers; cropping or repeating rows raise.
    """

    keys: torch.Tensor  # always views of the filled part (`_view`), never None as in DynamicLayer
    values: torch.Tensor

    def __init__(self, keys_buffer: torch.Tensor, values_buffer: torch.Tensor, length: int) -> None:
        """Adopt ``[batch, heads, capacity, dim]`` buffers whose first ``length`` columns are filled."""
        super().__init__()
        self.dtype, self.device = keys_buffer.dtype, keys_buffer.device
        self.is_initialized = True
        self._kbuf, self._vbuf, self._length = keys_buffer, values_buffer, length
        self._view()

    @classmethod
    def gather(cls, keys: torch.Tensor, values: torch.Tensor, rows: torch.Tensor, room: int
               ) -> AppendLayer:
        """A layer holding rows ``rows`` of ``keys``/``values``, with ``room`` spare columns."""
        n = keys.shape[2]
        kbuf = _select(keys, rows, n, n + room)
        vbuf = _select(values, rows, n, n + room)
        return cls(kbuf, vbuf, n)

    def _view(self) -> None:
        self.keys = self._kbuf[:, :, : self._length]
        self.values = self._vbuf[:, :, : self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._length + key_states.shape[-2]
        if end > self._kbuf.shape[2]:
            self._resize(None, 2 * end)
        self._kbuf[:, :, self._length : end] = key_states
        self._vbuf[:, :, self._length : end] = value_states
        self._length = end
        self._view()
        return self.keys, self.values

    def _resize(self, rows: torch.Tensor | None, capacity: int) -> None:
        """New buffers holding the filled columns of ``rows`` (all when None)."""
        if rows is None:
            rows = torch.arange(self._kbuf.shape[0], device=self._kbuf.device)
        self._kbuf = _select(self.keys, rows, self._length, capacity)
        self._vbuf = _select(self.values, rows, self._length, capacity)
        self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows ``indices`` (with the same room; only filled columns are copied)."""
        self._resize(indices, self._kbuf.shape[2])

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("AppendLayer does not crop")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("AppendLayer does not repeat rows")


def _select(t: torch.Tensor, rows: torch.Tensor, length: int, capacity: int) -> torch.Tensor:
    """A new ``[len(rows), heads, capacity, dim]`` buffer whose first ``length`` columns are
    ``t[rows, :, :length]`` (copied once, straight into place); the rest is uninitialised."""
    buf = t.new_empty((rows.shape[0], t.shape[1], capacity, t.shape[3]))
    torch.index_select(t[:, :, :length], 0, rows, out=buf[:, :, :length])
    return buf


def _cache_of(layers: list[AppendLayer]) -> DynamicCache:
    cache = DynamicCache()
    cache.layers = list(layers)
    cache.layer_class_to_replicate = None  # all layers exist; none is added lazily
    return cache


def gather_cache(cache: DynamicCache, rows: torch.Tensor, room: int) -> DynamicCache:
    """Rows ``rows`` (a 1-D index tensor, repeats allowed) of a batch cache, as a new cache of
    :class:`AppendLayer` with ``room`` spare columns per row for the tokens still to come."""
    layers = cast("list[_FilledLayer]", cache.layers)
    return _cache_of([AppendLayer.gather(layer.keys, layer.values, rows, room) for layer in layers])


def row_kv(cache: DynamicCache, row: int, columns: torch.Tensor) -> SeqKV:
    """Copy one row's KV at the given cache columns (a 1-D index tensor), as contiguous tensors."""
    out = []
    for layer in cast("list[_FilledLayer]", cache.layers):
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
