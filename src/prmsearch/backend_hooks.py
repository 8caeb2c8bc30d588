"""Every optional hook the driver and `Searcher` read from a backend, declared with its default
on a base class (`PolicyBackend`, `ScorerBackend`): a backend subclasses one and overrides what
differs, and the search reads the hooks through `policy_hooks` / `scorer_hooks`, never by
probing the backend."""

from __future__ import annotations

import warnings


class BackendHooks:
    """What policies and scorers both declare."""

    @property
    def computes_on_host_cpu(self) -> bool:
        """Whether the model runs on this machine's CPU: where the policy's and the scorer's both
        do, the default schedule keeps them in lock-step rounds, since working at once on the
        same cores only slows both."""
        return False


class PolicyBackend(BackendHooks):
    """The hooks of a policy backend (see the module docstring)."""

    @property
    def parallel_calls(self) -> bool:
        """Whether ``generate`` may be called from several threads at once (a server that batches
        across requests by itself): the async flow then sends each problem's requests as their
        own call."""
        return False

    def domain_note(self, question: str) -> str | None:
        """A note for a question outside what the model knows (`Searcher` adds it to that
        question's result), or None."""
        return None


class ScorerBackend(BackendHooks):
    """The hooks of a scorer backend (see the module docstring)."""

    @property
    def reads_policy_logprobs(self) -> bool:
        """Whether the scorer reads the policy's token log-probabilities: its score requests then
        carry them, and the policy is asked for them."""
        return False


class _PolicyByAttributes(PolicyBackend):
    """The hooks of an older policy that sets them as plain attributes (deprecated)."""

    def __init__(self, policy: object) -> None:
        self._policy = policy

    @property
    def parallel_calls(self) -> bool:
        return bool(getattr(self._policy, "parallel_calls", False))

    @property
    def computes_on_host_cpu(self) -> bool:
        return bool(getattr(self._policy, "computes_on_host_cpu", False))

    def domain_note(self, question: str) -> str | None:
        note = getattr(self._policy, "domain_note", None)
        return note(question) if callable(note) else None


class _ScorerByAttributes(ScorerBackend):
    """The hooks of an older scorer that sets them as plain attributes (deprecated), or of a
    policy that is also the scorer (its own `computes_on_host_cpu`)."""

    def __init__(self, scorer: object) -> None:
        self._scorer = scorer

    @property
    def reads_policy_logprobs(self) -> bool:
        return bool(getattr(self._scorer, "reads_policy_logprobs", False))

    @property
    def computes_on_host_cpu(self) -> bool:
        return bool(getattr(self._scorer, "computes_on_host_cpu", False))


def _warn_old_style(backend: object, names: tuple[str, ...], base: str) -> None:
    declared = [name for name in names if hasattr(backend, name)]
    if declared and not isinstance(backend, BackendHooks):
        warnings.warn(f"{type(backend).__name__} declares {', '.join(declared)} without subclassing "
                      f"prmsearch.backend_hooks.{base}; subclass it (these attributes are read this "
                      "way for one more release)", DeprecationWarning, stacklevel=3)


def policy_hooks(policy: object) -> PolicyBackend:
    """The hooks ``policy`` declares: itself when it subclasses `PolicyBackend`; else its plain
    attributes of the same names (an older backend, with a DeprecationWarning) or the defaults."""
    if isinstance(policy, PolicyBackend):
        return policy
    _warn_old_style(policy, ("parallel_calls", "computes_on_host_cpu", "domain_note"), "PolicyBackend")
    return _PolicyByAttributes(policy)


def scorer_hooks(scorer: object) -> ScorerBackend:
    """The hooks ``scorer`` declares: itself when it subclasses `ScorerBackend`; else its plain
    attributes of the same names (an older backend, with a DeprecationWarning; none for a policy
    that is also the scorer) or the defaults."""
    if isinstance(scorer, ScorerBackend):
        return scorer
    _warn_old_style(scorer, ("reads_policy_logprobs", "computes_on_host_cpu"), "ScorerBackend")
    return _ScorerByAttributes(scorer)
