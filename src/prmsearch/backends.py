"""Registration of the built-in backends by name, lazily: nothing heavy is imported here."""

from __future__ import annotations

from prmsearch.policies.base import POLICIES, register_policy
from prmsearch.scorers.base import SCORERS, register_scorer

_POLICIES = {
    "hf": ("prmsearch.policies.hf:HFPolicy", "Hugging Face transformers causal LM"),
    "vllm": ("prmsearch.policies.vllm:VLLMPolicy", "vLLM offline engine, prefix caching, one call a round"),
    "openai": ("prmsearch.policies.openai:OpenAIPolicy", "any OpenAI-compatible /v1/completions server"),
    "sglang": ("prmsearch.policies.sglang:SGLangPolicy", "SGLang offline Engine or native /generate (GPU)"),
    "arith": ("prmsearch.arith.defaults:arith_policy", "the embedded arithmetic policy (default)"),
}
_SCORERS: dict[str, tuple[str, str]] = {
    "qwen-prm": ("prmsearch.scorers.hf:qwen_prm", "Qwen2.5-Math-PRM layout (<extra_0>, 2-class head)"),
    "math-shepherd": ("prmsearch.scorers.hf:math_shepherd", "Math-Shepherd (ки tags, +/- logits)"),
    "rlhflow": ("prmsearch.scorers.hf:rlhflow", "RLHFlow multi-turn chat PRM (+/- turns)"),
    "skywork": ("prmsearch.scorers.hf:skywork", "Skywork PRM (value head, sigmoid)"),
    "token-cls": ("prmsearch.scorers.hf:token_cls", "any 2-label token classifier at a separator"),
    "vllm-qwen-prm": ("prmsearch.scorers.vllm:vllm_qwen_prm", "qwen-prm family on vLLM's pooling runner"),
    "policy-confidence": (
        "prmsearch.scorers.confidence:policy_confidence",
        "PRM-free baseline: the policy's minimum token probability so far",
    ),
    "arith": ("prmsearch.arith.defaults:arith_prm", "the embedded arithmetic PRM (default)"),
    "arith-oracle": ("prmsearch.arith.oracle:arith_oracle", "the exact checker as a PRM (upper bound)"),
}


def register_builtin_backends() -> None:
    """Register every built-in backend once (idempotent)."""
    for name, (target, summary) in _POLICIES.items():
        if name not in POLICIES:
            register_policy(name, target, summary)
    for name, (target, summary) in _SCORERS.items():
        if name not in SCORERS:
            register_scorer(name, target, summary)
