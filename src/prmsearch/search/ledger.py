"""The compute ledger: what a search spent, charged by the driver the same way for every strategy.

Counts are exact integers (FLOPs included, by the one formula of :mod:`prmsearch.costs`), so
per-problem ledgers add up to the total exactly. ``wall_s`` of a problem is the time it spent in the batch;
the total's ``wall_s`` is the run's wall-clock time, not a sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(slots=True)
class Ledger:
    """Compute spent on one problem (or, summed, on a run).

    Attributes:
        policy_calls: generation requests sent to the policy (one per expanded node).
        generations: samples generated (sum of the requests' ``n``).
        generated_tokens: tokens decoded by the policy.
        prompt_tokens_computed: prompt tokens the policy had to prefill.
        prompt_tokens_cached: prompt tokens served from a prefix cache.
        prm_calls: score requests sent to the PRM (one per scored path).
        prm_tokens_computed: tokens the PRM ran through its model.
        prm_tokens_cached: tokens whose PRM result was reused.
        policy_flops: the policy's forward FLOPs over prompt tokens computed and generated tokens
            (:meth:`prmsearch.costs.ModelCost.generation_flops`).
        prm_flops: the PRM's forward FLOPs over the tokens it computed
            (:meth:`prmsearch.costs.ModelCost.scoring_flops`); 0 for a strategy that reads no score.
        wall_s: seconds the problem spent in the search (the run's wall clock for a total).
    """

    policy_calls: int = 0
    generations: int = 0
    generated_tokens: int = 0
    prompt_tokens_computed: int = 0
    prompt_tokens_cached: int = 0
    prm_calls: int = 0
    prm_tokens_computed: int = 0
    prm_tokens_cached: int = 0
    policy_flops: int = 0
    prm_flops: int = 0
    wall_s: float = 0.0

    @property
    def flops(self) -> int:
        """Policy plus PRM FLOPs."""
        return self.policy_flops + self.prm_flops

    def charge_generation(
        self, *, n: int, generated: int, computed: int, cached: int, flops: int, calls: int = 1
    ) -> None:
        """Charge ``calls`` generation requests (one by default) with these totals."""
        self.policy_calls += calls
        self.generations += n
        self.generated_tokens += generated
        self.prompt_tokens_computed += computed
        self.prompt_tokens_cached += cached
        self.policy_flops += flops

    def charge_scoring(self, *, computed: int, cached: int, flops: int, calls: int = 1) -> None:
        """Charge ``calls`` score requests (one by default) with these totals."""
        self.prm_calls += calls
        self.prm_tokens_computed += computed
        self.prm_tokens_cached += cached
        self.prm_flops += flops

    def add(self, other: Ledger) -> None:
        """Add ``other``'s counts into this ledger (wall time included)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict with the FLOP total added."""
        return {**asdict(self), "flops": self.flops}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ledger:
        """Inverse of :meth:`to_dict` (derived keys ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def total(cls, ledgers: Iterable[Ledger], wall_s: float | None = None) -> Ledger:
        """Sum of ``ledgers``; ``wall_s`` replaces the summed wall time when given."""
        result = cls()
        for ledger in ledgers:
            result.add(ledger)
        if wall_s is not None:
            result.wall_s = wall_s
        return result
