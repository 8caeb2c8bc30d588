"""Prefixes that several inputs of one forward call share, found so that they run once.

A scorer's call often holds many inputs that begin alike: the question (and the PRM's prompt
template) under each of N whole solutions, or under every first step of a beam. A KV prefix
cache only helps from the second call on; within one call each input would compute the shared
tokens again. :func:`shared_prefix_runs` finds, among the inputs, groups that share a prefix
longer than what each already has cached, so the caller can run that prefix once, store its KV
and let every input of the group start from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SharedPrefix:
    """``length`` tokens that the inputs ``members`` (indices into the caller's list) all begin
    with; ``members[0]``'s ids hold them."""

    length: int
    members: tuple[int, ...]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.asarray(a[:n]) != np.asarray(b[:n])
    return int(differ.argmax()) if differ.any() else n


def shared_prefix_runs(
    ids: Sequence[Sequence[int]],
    cached: Sequence[int],
    limits: Sequence[int],
    min_tokens: int,
) -> list[SharedPrefix]:
    """Groups of two or more inputs that share a prefix worth running once.

    Args:
        ids: each input's token ids.
        cached: tokens each input already has from a KV cache.
        limits: the most tokens of each input a shared prefix may cover (an input must still
            compute the token whose output it reads; a prefix never covers a whole input).
        min_tokens: the least a prefix must add to every member's cached tokens to be worth a
            forward of its own.

    Inputs are sorted, neighbours sharing at least ``min_tokens`` leading tokens form a group,
    and a group's prefix is the shortest such overlap in it, cut to its members' limits. Each
    input is in at most one group; a group whose prefix adds fewer than ``min_tokens`` to some
    member's cache is dropped."""
    if not (len(ids) == len(cached) == len(limits)):
        raise ValueError(f"got {len(ids)} inputs, {len(cached)} cached counts and {len(limits)} limits")
    if min_tokens < 1:
        raise ValueError(f"min_tokens must be >= 1, got {min_tokens}")
    order = sorted(range(len(ids)), key=lambda i: list(ids[i]))
    groups: list[tuple[int, list[int]]] = []
    run: list[int] = []
    shared = 0
    for position, index in enumerate(order):
        common = common_prefix_length(ids[order[position - 1]], ids[index]) if position else 0
        if run and common >= min_tokens:
            run.append(index)
            shared = min(shared, common)
            continue
        if len(run) > 1:
            groups.append((shared, run))
        run, shared = [index], len(ids[index])
    if len(run) > 1:
        groups.append((shared, run))
    found = []
    for shared, members in groups:
        length = min(shared, *(min(limits[i], len(ids[i]) - 1) for i in members))
        if length - max(cached[i] for i in members) >= min_tokens:
            found.append(SharedPrefix(length, tuple(members)))
    return found
