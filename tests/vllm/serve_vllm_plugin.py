"""A test plugin: ``vllm-arith``, the embedded policy on the offline vLLM CPU engine (float32,
context 256), for ``prmsearch --plugin ... serve --policy vllm-arith``."""

from __future__ import annotations

from prmsearch.arith.models import default_policy_path
from prmsearch.policies.base import register_policy


def vllm_arith():
    from prmsearch.policies.vllm import VLLMPolicy

    return VLLMPolicy(default_policy_path(), dtype="float32", max_model_len=256)


register_policy("vllm-arith", vllm_arith, "the embedded policy on the vLLM CPU engine", replace=True)
