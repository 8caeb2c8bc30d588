"""Keys for token id sequences and their prefixes: what the prefix KV cache and the exact PRM
score caches look things up by. Torch-free, so a client-only install (a PRM on a server) can use
them."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = ["prefix_digests", "token_key"]


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
