"""A bounded cache of exact step scores, keyed by the tokens each score depends on.

Why: a search scores the same path prefixes over and over (a beam's parent path is part of every
child path). The PRMs served here are causal, so step ``j``'s score depends only on the token ids
up to and including its read position: a digest of exactly those ids is a key that can never
return a wrong score. A path whose every step key is present costs nothing; the rest are scored
in full and their scores stored. Used by the PRM scorers that have no prefix KV cache of their own
(the vLLM scorers); torch-free so that a client machine without torch can use it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from prmsearch.engines.token_keys import prefix_digests


def step_keys(ids: Sequence[int], positions: Sequence[int]) -> list[bytes]:
    """One key per step: the digest of ``ids[: position + 1]`` (each token hashed once)."""
    return prefix_digests(ids, [position + 1 for position in positions])


class StepScoreCache:
    """A thread-safe LRU of ``key -> score`` holding at most ``entries`` scores (0: disabled).

    Example::

        cache = StepScoreCache(200_000)
        keys = step_keys(ids, positions)
        scores = cache.lookup(keys)          # None unless every step is cached
        if scores is None:
            scores = run_the_prm(ids)
            cache.store(keys, scores)
    """

    def __init__(self, entries: int) -> None:
        if not isinstance(entries, int) or isinstance(entries, bool) or entries < 0:
            raise ValueError(f"score_cache_entries must be an int >= 0, got {entries!r}")
        self.entries = entries
        self._scores: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.entries > 0

    def __len__(self) -> int:
        return len(self._scores)

    def lookup(self, keys: Sequence[bytes]) -> np.ndarray | None:
        """The cached scores of every key (float64, refreshed as recently used), or None when
        any key is missing (the path is then scored in full)."""
        if not self.enabled or not keys:
            return None
        with self._lock:
            got = [self._scores.get(k) for k in keys]
            if any(s is None for s in got):
                return None
            for k in keys:
                self._scores.move_to_end(k)
        return np.array(got, dtype=np.float64)

    def known(self, keys: Sequence[bytes]) -> list[float | None]:
        """The cached score of each key, None where it is missing (a scorer that can score
        single steps then runs only those)."""
        if not self.enabled:
            return [None] * len(keys)
        with self._lock:
            got = [self._scores.get(k) for k in keys]
            for k, score in zip(keys, got, strict=True):
                if score is not None:
                    self._scores.move_to_end(k)
        return got

    def store(self, keys: Sequence[bytes], scores: Sequence[float] | np.ndarray) -> None:
        """Remember one score per key, evicting the least recently used beyond the bound."""
        if not self.enabled:
            return
        with self._lock:
            for key, score in zip(keys, scores, strict=True):
                self._scores[key] = float(score)
                self._scores.move_to_end(key)
            while len(self._scores) > self.entries:
                self._scores.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._scores.clear()
