"""Scorers: the :class:`~prmsearch.scorers.base.Scorer` protocol, PRM families and backends.

Every PRM family declared in :mod:`prmsearch.scorers.formats` (one decorated class each) is a
scorer name of its own on the transformers backend. The other built-in scorers are registered
here by name, lazily, so importing this package never imports torch or vLLM.
"""

from __future__ import annotations

from prmsearch.scorers import formats as _formats  # registers the PRM families
from prmsearch.scorers.base import HF_PRM, SCORERS, make_scorer, register_scorer

__all__ = ["SCORERS", "SCORER_BACKENDS", "backend_scorer", "make_scorer", "register_scorer"]

#: the built-in PRM families read from a language-model head: one-token generations on vLLM
LM_HEAD_FAMILIES = _formats.families_with_head("lm")
#: the scorer that runs a PRM family on a backend other than transformers (``hf``: the family's own)
SCORER_BACKENDS: dict[str, dict[str, str]] = {
    # vLLM in process: qwen-prm on the pooling runner, the LM-head families as verdict logprobs
    "vllm": {"qwen-prm": "vllm-qwen-prm", **{family: f"vllm-{family}" for family in LM_HEAD_FAMILIES}},
    "vllm-server": {"qwen-prm": "vllm-server"},  # a vLLM pooling server (another process or host)
}


def backend_scorer(backend: str | None, family: str) -> str:
    """The registered scorer that runs PRM ``family`` on ``backend`` (None or ``hf``: the family
    itself); a family the backend does not run is a ValueError naming those it does."""
    if backend in (None, "hf"):
        return family
    families = SCORER_BACKENDS.get(backend)
    if families is None:
        known = ", ".join(["hf", *SCORER_BACKENDS])
        raise ValueError(f"unknown PRM backend {backend!r}; the PRM backends are {known}")
    if family not in families:
        raise ValueError(f"the {backend} PRM backend runs the families {', '.join(families)}, "
                         f"got {family!r}; use the hf backend for it")
    return families[family]

_BUILTIN = {
    "vllm-qwen-prm": ("prmsearch.scorers.vllm:vllm_qwen_prm", "qwen-prm family on vLLM's pooling runner"),
    "vllm-server": (
        "prmsearch.scorers.vllm_server:vllm_server_prm",
        "qwen-prm family on a vLLM pooling server (another process or host), by base_url",
    ),
    "policy-confidence": (
        "prmsearch.scorers.confidence:policy_confidence",
        "PRM-free baseline: the policy's token probabilities (mean, min or last)",
    ),
    HF_PRM: ("prmsearch.scorers.hf:HFPRMScorer", "any PRM family on transformers (family=...)"),
}
# The embedded domain's PRM and oracle register through the ``prmsearch.plugins`` entry point
# (prmsearch.arith.plugin), like a third-party package's.

for _name, (_target, _summary) in _BUILTIN.items():
    if not SCORERS.has(_name):
        register_scorer(_name, _target, _summary)
for _family in LM_HEAD_FAMILIES:
    if not SCORERS.has(f"vllm-{_family}"):
        SCORERS.register(f"vllm-{_family}", "prmsearch.scorers.vllm_verdict:vllm_lm_prm",
                         f"{_family} family on vLLM (the label tokens' logprobs of one-token generations)",
                         bound={"family": _family})
