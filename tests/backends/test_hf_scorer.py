"""HFPRMScorer for every family: layout, ranges, batched == one-by-one == incremental, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_scorer_for

from prmsearch.engines.prompt_formats import QWEN_MATH_SYSTEM
from prmsearch.scorers.base import ScoreRequest, check_scores

PATHS = [
    ScoreRequest("What is 1+2?", ("1+2 = 3", "So the answer is 3.")),
    ScoreRequest("Compute 7 * 6.", ("7 * 6 = 42",)),
    ScoreRequest("Compute 7 * 6.", ("7 * 6 = 42", "Check: 42 / 6 = 7 +", "Answer: 42")),
    ScoreRequest("A longer question, with more words in it, so lengths differ?",
                 ("first step\nwith a newline", "second")),
]


@pytest.fixture(scope="module")
def scorers(family, family_dir):
    """(caching scorer, scorer with every cache off) for one family."""
    return (make_scorer_for(family, family_dir),
            make_scorer_for(family, family_dir, prefix_cache_tokens=0, score_cache_entries=0))


def reference_scores(scorer, request) -> np.ndarray:
    """Full unpadded forward of the whole encoded input, read at the read positions."""
    ids, positions = scorer.encode(request)
    x = torch.tensor([ids])
    runner = scorer._runner
    with torch.no_grad():
        h = runner.hidden(x, torch.ones_like(x), torch.arange(len(ids))[None], None)[0]
        return scorer.format.probabilities(runner.head(h[positions])).double().numpy()


def test_one_score_per_step_in_unit_interval(scorers):
    cached, _ = scorers
    for r, s in zip(PATHS, cached.score(PATHS)):
        scores = np.asarray(check_scores(r, s))
        assert scores.shape == (len(r.steps),)
        assert np.all((scores >= 0) & (scores <= 1))


def test_batched_equals_one_by_one_equals_reference(scorers):
    _, fresh = scorers
    batched = [s.scores for s in fresh.score(PATHS)]
    single = [fresh.score([r])[0].scores for r in PATHS]
    for r, b, s in zip(PATHS, batched, single):
        np.testing.assert_allclose(b, s, atol=1e-5)
        np.testing.assert_allclose(b, reference_scores(fresh, r), atol=1e-5)


def test_incremental_equals_full_and_computes_only_new_tokens(scorers):
    cached, fresh = scorers
    cached.clear_caches()
    path = PATHS[2]
    full = fresh.score([path])[0]
    total_computed = 0
    for k in range(1, len(path.steps) + 1):
        prefix = ScoreRequest(path.question, path.steps[:k])
        got = cached.score([prefix])[0]
        np.testing.assert_allclose(got.scores, full.scores[:k], atol=1e-5)
        if k > 1:
            assert got.tokens_cached > 0
        total_computed += got.tokens_computed
        assert got.tokens_computed + got.tokens_cached == full.tokens_computed if k == len(
            path.steps) else True
    assert total_computed == full.tokens_computed  # each token computed exactly once
    again = cached.score([path])[0]
    assert (again.tokens_computed, again.tokens_cached) == (0, full.tokens_computed)
    np.testing.assert_allclose(again.scores, full.scores, atol=1e-5)


def test_siblings_share_the_parent_prefix(scorers):
    cached, fresh = scorers
    cached.clear_caches()
    parent = ScoreRequest("Compute 7 * 6.", ("7 * 6 = 42",))
    kids = [ScoreRequest(parent.question, (*parent.steps, t)) for t in ("42", "Answer: 41", "6*7")]
    cached.score([parent])
    got = cached.score(kids)
    want = fresh.score(kids)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.scores, w.scores, atol=1e-5)
        assert g.tokens_cached > 0 and g.tokens_computed < w.tokens_computed
        assert g.tokens_computed + g.tokens_cached == w.tokens_computed


def test_identical_requests_in_one_call_run_once(scorers):
    """Sibling steps with the same text: the duplicate reuses the first one's scores, exactly,
    and is charged as cached (with every cache off too: this is within one call)."""
    _, fresh = scorers
    twice = [PATHS[2], PATHS[0], PATHS[2], PATHS[2]]
    got = fresh.score(twice)
    once = fresh.score([PATHS[2], PATHS[0]])
    for k in (2, 3):
        np.testing.assert_array_equal(got[k].scores, got[0].scores)
        assert (got[k].tokens_computed, got[k].tokens_cached) == (0, got[0].tokens_computed)
    np.testing.assert_allclose(got[0].scores, once[0].scores, atol=1e-6)
    assert sum(g.tokens_computed for g in got) == sum(o.tokens_computed for o in once)
    got[2].scores[0] = -1.0  # each request gets its own array
    assert got[3].scores[0] != -1.0


def test_small_token_budget_same_scores(family, family_dir, scorers):
    _, fresh = scorers
    tight = make_scorer_for(family, family_dir, max_batch_tokens=64)
    for a, b in zip(tight.score(PATHS), fresh.score(PATHS)):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)


def test_empty_request_and_bad_steps(scorers, family):
    cached, _ = scorers
    assert cached.score([ScoreRequest("q", ())])[0].scores.shape == (0,)
    with pytest.raises(ValueError, match="step 1 is empty"):
        cached.score([ScoreRequest("q", ("a", "  "))])
    sep = cached.format.separator_text
    if sep:
        with pytest.raises(ValueError, match="contains the step separator"):
            cached.score([ScoreRequest("q", ("a", f"b {sep} c"))])


def test_too_long_input_is_an_error(scorers):
    cached, _ = scorers
    with pytest.raises(ValueError, match="more than the PRM context"):
        cached.score([ScoreRequest("q", ("word " * 600,))])


def _toks(scorer, ids):
    return scorer.tokenizer.convert_ids_to_tokens(ids)


def test_layout_qwen_prm(qwen_prm_dir):
    s = make_scorer_for("qwen-prm", qwen_prm_dir)
    ids, pos = s.encode(ScoreRequest("Q?", ("a", "b")))
    assert s.tokenizer.decode(ids) == (
        f"<|im_start|>system\n{QWEN_MATH_SYSTEM}<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n"
        "<|im_start|>assistant\na<extra_0>b<extra_0><|im_end|>\n"
    )
    t = _toks(s, ids)
    assert [t[p] for p in pos] == ["<extra_0>", "<extra_0>"]
    assert [t[p - 1] for p in pos] == ["a", "b"]


def test_layout_math_shepherd(math_shepherd_dir):
    s = make_scorer_for("math-shepherd", math_shepherd_dir)
    ids, pos = s.encode(ScoreRequest("Q?", ("a", "b")))
    assert s.tokenizer.decode(ids) == "Q? a ки\nb ки"
    t = _toks(s, ids)
    assert [t[p] for p in pos] == ["ĠÐºÐ¸"] * 2
    assert _toks(s, list(s.format.label_ids)) == ["+", "Ġ-"]


def test_layout_rlhflow_placeholder_is_exact(rlhflow_dir):
    s = make_scorer_for("rlhflow", rlhflow_dir)
    ids, pos = s.encode(ScoreRequest("Q?", ("1 + 1 = 2 +", "+")))
    assert s.tokenizer.decode(ids) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ? 1 + 1 = 2 +<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n+<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n+<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n+<|eot_id|>"
    )
    plus = s.tokenizer.convert_tokens_to_ids("+")
    assert [ids[p + 1] for p in pos] == [plus, plus]
    assert [_toks(s, ids)[p] for p in pos] == ["ĊĊ", "ĊĊ"]


def test_layout_skywork(skywork_dir):
    s = make_scorer_for("skywork", skywork_dir)
    ids, pos = s.encode(ScoreRequest("Q?", ("a\nb", "c")))
    assert s.tokenizer.decode(ids) == "<|bos|>Q?\na b\nc\n"
    t = _toks(s, ids)
    assert [t[p] for p in pos] == ["Ċ", "Ċ"]
    assert [t[p - 1] for p in pos] == ["b", "c"]
    assert t[0] == "<|bos|>"


def test_layout_token_cls(token_cls_dir):
    s = make_scorer_for("token-cls", token_cls_dir)
    ids, pos = s.encode(ScoreRequest("Q?", ("a", "b")))
    assert s.tokenizer.decode(ids) == "Q?\na<sep>b<sep>"
    assert [_toks(s, ids)[p] for p in pos] == ["<sep>", "<sep>"]


def test_family_errors(qwen_prm_dir, math_shepherd_dir, skywork_dir):
    from prmsearch.scorers.hf import HFPRMScorer

    with pytest.raises(ValueError, match=r"unknown PRM family 'qwen'.*known families"):
        HFPRMScorer(qwen_prm_dir, "qwen", device="cpu")
    with pytest.raises(ValueError, match="Qwen2ForProcessRewardModel"):
        HFPRMScorer(math_shepherd_dir, "qwen-prm", device="cpu",
                    tokenizer=make_scorer_for("qwen-prm", qwen_prm_dir).tokenizer)
    with pytest.raises(ValueError, match="chat template"):
        HFPRMScorer(math_shepherd_dir, "rlhflow", device="cpu")
    with pytest.raises(KeyError, match=r"no tensors under 'v_head\.summary'"):
        HFPRMScorer(qwen_prm_dir, "skywork", device="cpu",
                    tokenizer=make_scorer_for("skywork", skywork_dir).tokenizer)
    with pytest.raises(ValueError, match="single token"):
        HFPRMScorer(qwen_prm_dir, "token-cls", device="cpu",
                    format_options={"separator": "<nope>"})


def test_config_validation(qwen_prm_dir):
    from prmsearch.scorers.hf import HFPRMConfig

    with pytest.raises(ValueError, match="max_batch_tokens must be an int >= 1, got 0"):
        HFPRMConfig(model="m", family="qwen-prm", max_batch_tokens=0)
    with pytest.raises(ValueError, match="prefix_cache_tokens"):
        HFPRMConfig(model="m", family="qwen-prm", prefix_cache_tokens=-1)
    with pytest.raises(ValueError, match="packed_row_tokens must be an int >= 1"):
        HFPRMConfig(model="m", family="qwen-prm", packed_row_tokens=0)


def test_factories_and_num_parameters(qwen_prm_dir):
    from prmsearch.scorers import hf

    s = hf.HFPRMScorer(qwen_prm_dir, "qwen-prm", device="cpu")
    assert s.config.family == "qwen-prm"
    assert s.num_parameters == sum(p.numel() for p in s.model.parameters())


def test_verifier_asks_one_question_per_step_and_reads_before_each_answer(policy_dir):
    from prmsearch.scorers.hf import HFPRMScorer

    scorer = HFPRMScorer(policy_dir, "verifier", device="cpu", format_options={"good": "Y", "bad": "N"})
    fmt = scorer.format
    steps = ("7 + 5 = 12", "12 * 3 = 36")
    ids, positions = scorer.encode(ScoreRequest("Start with 7. Add 5. Times 3?", steps))
    assert len(positions) == 2 and all(ids[p + 1] == fmt.good_id for p in positions)
    text = scorer.tokenizer.decode(ids)
    assert "Problem:\nStart with 7." in text and text.count("Is step 2 correct? Answer Y or N.") == 1
    assert "12 * 3 = 36" in scorer.tokenizer.decode(ids[positions[0] + 1 :])  # after the first answer
    first_turn = scorer.tokenizer.decode(ids[: positions[0] + 1])
    assert "12 * 3" not in first_turn and first_turn.endswith("assistant\n")


def test_verifier_refuses_a_verdict_word_that_is_not_one_token(policy_dir):
    from prmsearch.scorers.hf import HFPRMScorer

    with pytest.raises(ValueError, match=r"verifier: the positive verdict 'Yes' must be a single token"):
        HFPRMScorer(policy_dir, "verifier", device="cpu")
    with pytest.raises(ValueError, match=r"verifier: the turn template must contain \{step\}"):
        HFPRMScorer(policy_dir, "verifier", device="cpu",
                    format_options={"good": "Y", "bad": "N", "turn": "?"})


def test_auto_layout_packs_wide_causal_models_on_a_cpu(scorers, family):
    from prmsearch.scorers.hf import PACKING_MIN_HIDDEN, packs_by_default

    cached, _ = scorers
    assert not cached.packed  # the test models are narrow: packing would not pay
    assert packs_by_default(True, "cpu", PACKING_MIN_HIDDEN) and packs_by_default(True, "cpu", 896)
    assert not packs_by_default(True, "cpu", 128) and not packs_by_default(True, "cuda", 4096)
    assert not packs_by_default(False, "cpu", 4096)


def test_packed_equals_padded_with_and_without_prefixes(family, family_dir, scorers):
    """Packed forwards (one row, each sequence attending to itself) give the padded scores and
    token counts, on fresh inputs and on children of cached prefixes."""
    cached, _ = scorers
    if not cached.causal:
        pytest.skip("this model cannot be packed")
    padded = make_scorer_for(family, family_dir, layout="padded")
    packed = make_scorer_for(family, family_dir, layout="packed")
    for scorer in (padded, packed):
        assert scorer.packed is (scorer is packed)
    kids = [ScoreRequest(p.question, (*p.steps, "and one more step")) for p in PATHS]
    for batch in (PATHS, kids, PATHS + kids):
        want, got = padded.score(batch), packed.score(batch)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.scores, w.scores, atol=1e-5)
            assert (g.tokens_computed, g.tokens_cached) == (w.tokens_computed, w.tokens_cached)
    assert any(g.tokens_cached > 0 for g in packed.score([ScoreRequest(
        PATHS[2].question, (*PATHS[2].steps, "last"))]))


def test_packed_layout_needs_a_causal_decoder(token_cls_dir):
    from prmsearch.scorers.hf import HFPRMScorer

    with pytest.raises(ValueError, match="layout must be one of"):
        HFPRMScorer(token_cls_dir, "token-cls", device="cpu", layout="varlen",
                    format_options={"separator": "<sep>"})


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_a_shared_question_runs_once_in_one_call(family, family_dir, scorers, layout):
    """N solutions of one question in one call: the question's tokens run once (charged to the
    first request), every score equals the cache-free scorer's, and each request's computed plus
    cached tokens still add up to its input."""
    cached, fresh = scorers
    if not cached.causal:
        pytest.skip("no KV reuse for a non-causal model")
    scorer = make_scorer_for(family, family_dir, layout=layout)
    question = "A question: " + " ".join(f"item {k} costs {k + 3}" for k in range(4)) + "?"
    batch = [ScoreRequest(question, (f"first step {k}", f"so the answer is {k}")) for k in range(5)]
    got, want = scorer.score(batch), fresh.score(batch)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.scores, w.scores, atol=1e-5)
        assert g.tokens_computed + g.tokens_cached == w.tokens_computed
    shared = min(g.tokens_cached for g in got[1:])
    assert shared >= len(scorer.encode(batch[0])[0]) // 2  # the question's tokens at least
    assert sum(g.tokens_computed for g in got) == sum(w.tokens_computed for w in want) - 4 * shared
    again = scorer.score([ScoreRequest(question, ("first step 9",))])[0]  # the prefix stayed cached
    assert again.tokens_cached >= shared
