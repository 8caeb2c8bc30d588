"""Backend hooks are declared on PolicyBackend / ScorerBackend with defaults; an older backend that
sets them as plain attributes is still read, with a DeprecationWarning."""

from __future__ import annotations

import warnings

import pytest

from prmsearch.backend_hooks import PolicyBackend, ScorerBackend, policy_hooks, scorer_hooks


class Declared(PolicyBackend):
    @property
    def parallel_calls(self) -> bool:
        return True


class OldStyle:
    """A duck-typed policy of before the base classes."""

    parallel_calls = True

    def domain_note(self, question: str) -> str | None:
        return "off topic" if "?" not in question else None


class Plain:
    """A duck-typed backend that declares nothing."""


def test_a_backend_that_subclasses_declares_its_hooks_and_keeps_the_defaults():
    policy = Declared()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hooks = policy_hooks(policy)
    assert hooks is policy and hooks.parallel_calls and not hooks.computes_on_host_cpu
    assert hooks.domain_note("anything") is None
    scorer = ScorerBackend()
    assert scorer_hooks(scorer) is scorer and not scorer.reads_policy_logprobs


def test_an_old_style_backend_is_read_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="subclassing prmsearch.backend_hooks.PolicyBackend"):
        hooks = policy_hooks(OldStyle())
    assert hooks.parallel_calls and not hooks.computes_on_host_cpu
    assert hooks.domain_note("no question") == "off topic" and hooks.domain_note("why?") is None


def test_a_backend_that_declares_nothing_gets_the_defaults_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy, scorer = policy_hooks(Plain()), scorer_hooks(Plain())
    assert not policy.parallel_calls and not policy.computes_on_host_cpu and policy.domain_note("q") is None
    assert not scorer.reads_policy_logprobs and not scorer.computes_on_host_cpu


def test_the_shipped_backends_subclass_the_bases():
    from prmsearch.policies.hf import HFPolicy
    from prmsearch.policies.openai import OpenAIPolicy
    from prmsearch.policies.scripted import ScriptedPolicy
    from prmsearch.scorers.confidence import PolicyLogprobScorer
    from prmsearch.scorers.hf import HFPRMScorer
    from prmsearch.scorers.scripted import ScriptedScorer

    assert all(issubclass(cls, PolicyBackend) for cls in (HFPolicy, OpenAIPolicy, ScriptedPolicy))
    assert all(issubclass(cls, ScorerBackend) for cls in (HFPRMScorer, ScriptedScorer, PolicyLogprobScorer))
    assert PolicyLogprobScorer().reads_policy_logprobs
