"""Registration of the built-in backends by name, lazily: nothing heavy is imported here."""

from __future__ import annotations

from prmsearch.policies.base import POLICIES, register_policy
from prmsearch.scorers.base import SCORERS, register_scorer

_POLICIES = {
    "hf": ("prmsearch.policies.hf:HFPolicy", "Hugging Face transformers causal LM"),
}
_SCORERS: dict[str, tuple[str, str]] = {}


def register_builtin_backends() -> None:
    """Register every built-in backend once (idempotent)."""
    for name, (target, summary) in _POLICIES.items():
        if name not in POLICIES:
            register_policy(name, target, summary)
    for name, (target, summary) in _SCORERS.items():
        if name not in SCORERS:
            register_scorer(name, target, summary)
