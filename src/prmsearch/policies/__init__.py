"""Policy backends: the :class:`~prmsearch.policies.base.Policy` protocol and the built-in backends.

Built-ins are registered here by name, lazily (``"module:attr"``), so importing this package never
imports torch, vLLM or SGLang; ``make_policy(name, **kwargs)`` imports a backend when it is made.
Third-party backends register the same way with :func:`~prmsearch.policies.base.register_policy`,
from a module their package names as a ``prmsearch.plugins`` entry point (see `prmsearch.registry`).
"""

from __future__ import annotations

from prmsearch.policies.base import POLICIES, make_policy, register_policy

__all__ = ["POLICIES", "make_policy", "register_policy"]

_BUILTIN = {
    "hf": ("prmsearch.policies.hf:HFPolicy", "Hugging Face transformers causal LM"),
    "vllm": ("prmsearch.policies.vllm:VLLMPolicy", "vLLM offline engine, prefix caching, one call a round"),
    "openai": ("prmsearch.policies.openai:OpenAIPolicy", "any OpenAI-compatible /v1/completions server"),
    "sglang": ("prmsearch.policies.sglang:SGLangPolicy", "SGLang offline Engine or native /generate (GPU)"),
}
# The embedded domain's policy and judge register through the ``prmsearch.plugins`` entry point
# (prmsearch.arith.plugin), like a third-party package's.

for _name, (_target, _summary) in _BUILTIN.items():
    if not POLICIES.has(_name):
        register_policy(_name, _target, _summary)
