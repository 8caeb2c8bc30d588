"""Seeds: one splitmix64 mixer and the per-problem seed every layer derives its randomness from.

A problem's samples depend only on the run seed and the question text, so the same problem gets
the same samples alone, in a batch, on another worker, or when its rows are re-selected later.
"""

from __future__ import annotations

import zlib

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


def node_seed(state: int, node: int, serial: int) -> int:
    """``mix_seed_from(state, node, serial)`` unrolled: the driver seeds every generation request
    this way (a problem's state, the node expanded, how often it was expanded before), and the
    loop and argument tuple of the general form cost particle filtering ~0.3 us a request."""
    state = (state ^ (node & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
    state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK64
    state ^= state >> 29
    state = (state ^ (serial & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
    state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK64
    return (state ^ (state >> 29)) >> 1


def problem_seed(seed: int, question: str) -> int:
    """The seed of one problem: depends on the run seed and the question text only, so a problem
    gets the same samples alone, in a batch, or on another worker."""
    return mix_seed(seed, zlib.crc32(question.encode("utf-8")))
