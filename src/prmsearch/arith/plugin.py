"""The embedded domain's registrations: its policy, PRM, oracle and judge, by name.

Loaded through the ``prmsearch.plugins`` entry point (``pyproject.toml``), the way a third-party
package adds its own backends, strategies or datasets, so that no backend package names this
room above it. Every target is lazy (``"module:attr"``): loading this module imports no torch.
"""

from __future__ import annotations

from prmsearch.policies.base import POLICIES, register_policy
from prmsearch.scorers.base import SCORERS, register_scorer

_POLICIES = {
    "arith": ("prmsearch.arith.defaults:arith_policy", "the embedded arithmetic policy (default)"),
    "arith-judge": (
        "prmsearch.arith.judge:arith_judge",
        "a judge for the arithmetic domain: a model (folder) re-derives each step",
    ),
}
_SCORERS = {
    "arith": ("prmsearch.arith.defaults:arith_prm", "the embedded arithmetic PRM (default)"),
    "arith-oracle": ("prmsearch.arith.oracle:arith_oracle", "the exact checker as a PRM (upper bound)"),
}


def register() -> None:
    """Register the domain's parts (each name once: a user's own registration stays)."""
    for name, (target, summary) in _POLICIES.items():
        if not POLICIES.has(name):
            register_policy(name, target, summary)
    for name, (target, summary) in _SCORERS.items():
        if not SCORERS.has(name):
            register_scorer(name, target, summary)


register()
