"""Seeds: one splitmix64 mixer and the per-problem seed every layer derives its randomness from.

A problem's samples depend only on the run seed and the question text, so the same problem gets
the same samples alone, in a batch, on another worker, or when its rows are re-selected later.
"""

from __future__ import annotations

import zlib

import numpy as np

_MASK64 = (1 << 64) - 1


_START = 0x9E3779B97F4A7C15


def mixer_state(*values: int, state: int = _START) -> int:
    """The mixer's state after ``values``: a caller that mixes many seeds from one fixed first
    value (the driver: a problem's seed, then a node and an expansion count) mixes it once."""
    for value in values:
        state = (state ^ (value & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK64
        state ^= state >> 29
    return state


def mix_seed(*values: int) -> int:
    """A 63-bit seed mixed from ints (splitmix64), stable across runs and platforms."""
    return mixer_state(*values) >> 1


def mix_seed_from(state: int, *values: int) -> int:
    """``mix_seed(*first, *values)`` where ``state`` is ``mixer_state(*first)``."""
    return mixer_state(*values, state=state) >> 1


_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S29, _S31, _S1 = np.uint64(29), np.uint64(31), np.uint64(1)


def node_seeds(state: int, nodes: list[int], serials: list[int]) -> list[int]:
    """``mix_seed_from(state, node, serial)`` for every pair, in uint64 arithmetic that wraps as
    the mask does: a round's requests of one problem seeded at once (Python's big ints cost about
    a microsecond a seed; a round of particle filtering seeds ~25 requests a problem)."""
    if len(nodes) < 16:  # numpy's per-call cost outweighs a few big-int mixes
        return [mix_seed_from(state, node, serial) for node, serial in zip(nodes, serials)]
    mixed = np.array(nodes, dtype=np.uint64)
    mixed ^= np.uint64(state)
    for value in (None, serials):  # mix the node, then the serial, as `mixer_state` does
        if value is not None:
            mixed ^= np.array(value, dtype=np.uint64)
        mixed *= _M1
        mixed ^= mixed >> _S31
        mixed *= _M2
        mixed ^= mixed >> _S29
    return (mixed >> _S1).tolist()


def problem_seed(seed: int, question: str) -> int:
    """The seed of one problem: depends on the run seed and the question text only, so a problem
    gets the same samples alone, in a batch, or on another worker."""
    return mix_seed(seed, zlib.crc32(question.encode("utf-8")))
