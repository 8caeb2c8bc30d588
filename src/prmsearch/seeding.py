"""Seeds: one splitmix64 mixer and the per-problem seed every layer derives its randomness from.

A problem's samples depend only on the run seed and the question text, so the same problem gets
the same samples alone, in a batch, on another worker, or when its rows are re-selected later.
"""

from __future__ import annotations

import zlib

_MASK64 = (1 << 64) - 1


def mix_seed(*values: int) -> int:
    """A 63-bit seed mixed from ints (splitmix64), stable across runs and platforms."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK64
        state ^= state >> 29
    return state >> 1


def problem_seed(seed: int, question: str) -> int:
    """The seed of one problem: depends on the run seed and the question text only, so a problem
    gets the same samples alone, in a batch, or on another worker."""
    return mix_seed(seed, zlib.crc32(question.encode("utf-8")))
