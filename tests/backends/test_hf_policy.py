"""HFPolicy on a tiny random Phi model: stopping, logprobs, seeding, batching, prefix reuse."""

from __future__ import annotations

import pytest
import torch

from prmsearch.policies.base import Finish, GenerationRequest, SamplingParams
from prmsearch.policies.step_end import decode

QUESTION = "What is 12 + 30?"


def req(question=QUESTION, steps=(), n=4, seed=0, temperature=1.0, max_new=24, top_p=1.0,
        delimiter="\n\n", stop=True):
    sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new,
                        delimiter=delimiter)
    return GenerationRequest(question, tuple(steps), n, sp, seed=seed, stop_at_step=stop)


def same_samples(a, b, tol=1e-4):
    assert len(a.samples) == len(b.samples)
    for x, y in zip(a.samples, b.samples):
        assert (x.text, x.token_ids, x.finish) == (y.text, y.token_ids, y.finish)
        assert x.logprob == pytest.approx(y.logprob, abs=tol)


def teacher_forced_logprob(policy, prompt_ids, token_ids) -> float:
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(ids).logits[0].float(), dim=-1)
    n = len(prompt_ids)
    return float(sum(logp[n - 1 + i, t] for i, t in enumerate(token_ids)))


def teacher_forced_token_logprobs(policy, prompt_ids, token_ids) -> list[float]:
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(policy.model(ids).logits[0].float(), dim=-1)
    n = len(prompt_ids)
    return [float(logp[n - 1 + i, t]) for i, t in enumerate(token_ids)]


def assert_token_logprobs_add_up(sample):
    """The per-token values line up with the ids and sum to the sample's logprob."""
    assert isinstance(sample.token_logprobs, tuple)
    assert len(sample.token_logprobs) == len(sample.token_ids)
    assert all(isinstance(v, float) for v in sample.token_logprobs)
    assert sum(sample.token_logprobs) == pytest.approx(sample.logprob, abs=1e-9)


def test_n_samples_stop_at_delimiter(policy):
    gens = policy.generate([req(n=16, seed=1), req(steps=("12 + 30 = 42",), n=16, seed=2)])
    finishes = set()
    for g in gens:
        assert len(g.samples) == 16
        for s in g.samples:
            finishes.add(s.finish)
            full = decode(policy.tokenizer, s.token_ids)
            if s.finish is Finish.STEP:
                assert "\n\n" not in s.text and s.text.strip()
                # the ids cover the text and at most a piece of the delimiter
                assert full.startswith(s.text)
                assert "\n\n".startswith(full[len(s.text):])
            else:
                assert full == s.text
        assert g.tokens_generated >= sum(len(s.token_ids) for s in g.samples)
    assert Finish.STEP in finishes


def feed(policy, tokens, delimiter="\n\n", max_new=50, stop=True):
    """Drive the stopping logic with chosen tokens; return the output and tokens consumed."""
    from prmsearch.policies.hf import _RowState

    tok = policy.tokenizer
    ids = [tok.convert_tokens_to_ids(t) for t in tokens]
    row, r = _RowState(0, 0), req(delimiter=delimiter, max_new=max_new, stop=stop)
    for k, t in enumerate(ids):
        out = policy._advance(row, r, max_new, t, -0.5)
        if out is not None:
            return out, k + 1
    return None, len(ids)


def test_delimiter_as_one_token(policy):
    out, used = feed(policy, ["a", "b", "ĊĊ", "c"])
    assert (out.text, out.finish, used) == ("ab", Finish.STEP, 3)
    assert decode(policy.tokenizer, out.token_ids) == "ab"
    assert out.logprob == pytest.approx(-1.0)  # the delimiter token is not charged
    assert out.token_logprobs == (-0.5, -0.5)  # nor is its log-probability kept


def test_delimiter_across_tokens(policy):
    out, used = feed(policy, ["a", "Ċ", "b", "Ċ", "Ċ", "c"])
    assert (out.text, out.finish, used) == ("a\nb", Finish.STEP, 5)
    assert decode(policy.tokenizer, out.token_ids) == "a\nb"
    out, _ = feed(policy, ["a", "#", "#", "b"], delimiter="##")
    assert out.text == "a"


def test_delimiter_inside_a_token_with_text(policy):
    out, used = feed(policy, ["a", "b", ".ĊĊ", "c"])
    assert (out.text, out.finish, used) == ("ab.", Finish.STEP, 3)
    assert decode(policy.tokenizer, out.token_ids) == "ab.\n\n"  # mixed token kept in ids
    assert out.logprob == pytest.approx(-1.5)


def test_leading_delimiter_does_not_make_an_empty_step(policy):
    out, used = feed(policy, ["ĊĊ", "x", "ĊĊ"])
    assert (out.text, used) == ("\n\nx", 3)


def test_eos_and_length(policy):
    eos = policy.tokenizer.eos_token
    out, _ = feed(policy, ["a", "b", eos])
    assert (out.text, out.finish, len(out.token_ids)) == ("ab", Finish.EOS, 2)
    assert out.token_logprobs == (-0.5, -0.5)  # the EOS token's is dropped with it
    out, _ = feed(policy, ["a", "b", "c"], max_new=2)
    assert (out.text, out.finish) == ("ab", Finish.LENGTH)
    assert out.token_logprobs == (-0.5, -0.5)
    out, _ = feed(policy, ["a", "ĊĊ", "c"], max_new=3, stop=False)
    assert (out.text, out.finish) == ("a\n\nc", Finish.LENGTH)


def test_logprobs_match_teacher_forcing(policy):
    r = req(steps=("12 + 30",), n=6, seed=3)
    g = policy.generate([r])[0]
    prompt = policy.prompt_ids(r.question, r.steps)
    for s in g.samples:
        assert s.logprob == pytest.approx(teacher_forced_logprob(policy, prompt, s.token_ids),
                                          abs=1e-4)


@pytest.mark.parametrize("stop", [True, False])
def test_token_logprobs_align_with_the_ids_and_match_teacher_forcing(policy, stop):
    r = req(steps=("12 + 30",), n=4, seed=5, stop=stop, max_new=20)
    g = policy.generate([r])[0]
    prompt = policy.prompt_ids(r.question, r.steps)
    for s in g.samples:
        assert_token_logprobs_add_up(s)
        assert list(s.token_logprobs) == pytest.approx(
            teacher_forced_token_logprobs(policy, prompt, s.token_ids), abs=1e-4)


def test_greedy_is_argmax_and_identical(policy):
    g = policy.generate([req(n=3, temperature=0.0, max_new=12)])[0]
    assert len({s.token_ids for s in g.samples}) == 1
    prompt = policy.prompt_ids(QUESTION, ())
    ids = list(prompt)
    with torch.no_grad():
        for t in g.samples[0].token_ids:
            nxt = int(policy.model(torch.tensor([ids])).logits[0, -1].argmax())
            assert nxt == t
            ids.append(t)


def test_seed_reproducibility(policy):
    policy.prefix_cache.clear()
    a = policy.generate([req(n=5, seed=11)])[0]
    policy.prefix_cache.clear()
    b = policy.generate([req(n=5, seed=11)])[0]
    c = policy.generate([req(n=5, seed=12)])[0]
    same_samples(a, b)
    assert [s.token_ids for s in a.samples] != [s.token_ids for s in c.samples]


def test_samples_independent_of_batch_composition(policy):
    target = req(steps=("12 + 30 = 42",), n=4, seed=21)
    policy.prefix_cache.clear()
    alone = policy.generate([target])[0]
    policy.prefix_cache.clear()
    mixed = policy.generate([
        req(question="A much longer question that pads the batch: " + "x" * 40, n=7, seed=5),
        target,
        req(question="?", n=1, seed=6, temperature=0.0),
    ])
    same_samples(alone, mixed[1])
    # n=8 in one request: its first 4 samples equal an n=4 request with the same seed
    more = policy.generate([GenerationRequest(target.question, target.steps, 8, target.sampling,
                                              seed=21)])[0]
    for x, y in zip(alone.samples, more.samples[:4]):
        assert x.token_ids == y.token_ids


def test_small_token_budget_gives_same_samples(policy_dir, policy):
    from prmsearch.policies.hf import HFPolicy

    tight = HFPolicy(policy_dir, prompt_format="plain", device="cpu", dtype="float32",
                     max_batch_tokens=40, prefix_cache_tokens=0)
    reqs = [req(n=3, seed=s, steps=("1",) * s) for s in range(3)]
    for a, b in zip(policy.generate(reqs), tight.generate(reqs)):
        same_samples(a, b)


def test_prefix_cache_counts_are_real(policy_dir):
    from prmsearch.policies.hf import HFPolicy

    cached = HFPolicy(policy_dir, prompt_format="plain", device="cpu", dtype="float32")
    plain = HFPolicy(policy_dir, prompt_format="plain", device="cpu", dtype="float32",
                     prefix_cache_tokens=0)
    root = req(n=2, seed=1)
    first = cached.generate([root])[0]
    length = len(cached.prompt_ids(QUESTION, ()))
    assert (first.prompt_tokens_computed, first.prompt_tokens_cached) == (length, 0)
    step = next(s.text for s in first.samples if s.finish is Finish.STEP or s.text.strip())
    child = req(steps=(step,), n=3, seed=2)
    child_len = len(cached.prompt_ids(QUESTION, (step,)))
    a = cached.generate([child])[0]
    b = plain.generate([child])[0]
    assert a.prompt_tokens_cached >= length - 1 and a.prompt_tokens_cached > 0
    assert a.prompt_tokens_computed + a.prompt_tokens_cached == child_len
    assert (b.prompt_tokens_computed, b.prompt_tokens_cached) == (child_len, 0)
    same_samples(a, b)
    # the same request again: everything but the last prompt token is served from cache
    again = cached.generate([child])[0]
    assert (again.prompt_tokens_computed, again.prompt_tokens_cached) == (1, child_len - 1)
    same_samples(a, again)
    assert cached.prefix_cache.tokens <= cached.prefix_cache.max_tokens


def test_prefix_cache_is_bounded(policy_dir):
    from prmsearch.policies.hf import HFPolicy

    p = HFPolicy(policy_dir, prompt_format="plain", device="cpu", dtype="float32",
                 prefix_cache_tokens=30)
    p.generate([req(question=f"question number {i}", n=1, max_new=2) for i in range(6)])
    assert 0 < p.prefix_cache.tokens <= 30


def test_whole_solution_mode_runs_to_eos_or_length(policy):
    g = policy.generate([req(n=4, seed=4, stop=False, max_new=30)])[0]
    for s in g.samples:
        assert s.finish in (Finish.EOS, Finish.LENGTH)
        if s.finish is Finish.LENGTH:
            assert len(s.token_ids) == 30
    assert any("\n" in s.text for s in g.samples)


def test_top_p_restricts_to_nucleus(policy):
    tiny_p = policy.generate([req(n=4, seed=8, top_p=1e-6, max_new=8)])[0]
    greedy = policy.generate([req(n=1, temperature=0.0, max_new=8)])[0]
    for s in tiny_p.samples:
        assert s.token_ids == greedy.samples[0].token_ids


def test_oom_retry_with_half_batch(policy, monkeypatch):
    reqs = [req(n=4, seed=31), req(steps=("a",), n=4, seed=32)]
    policy.prefix_cache.clear()
    want = policy.generate(reqs)
    policy.prefix_cache.clear()
    real = policy._forward
    calls = {"boom": 0}

    def flaky(input_ids, *args, **kwargs):
        if input_ids.shape[0] > 2 and calls["boom"] < 3:
            calls["boom"] += 1
            raise torch.OutOfMemoryError("simulated")
        return real(input_ids, *args, **kwargs)

    monkeypatch.setattr(policy, "_forward", flaky)
    got = policy.generate(reqs)
    assert calls["boom"] > 0
    for a, b in zip(want, got):
        same_samples(a, b)


def test_context_overflow_is_an_error(policy):
    context = policy.model.config.max_position_embeddings
    with pytest.raises(ValueError, match="the model context only"):
        policy.generate([req(question="x " * context, n=1)])


def test_generation_stops_at_the_context_end_with_finish_length(policy):
    context = policy.model.config.max_position_embeddings
    prompt = len(policy.prompt_ids(QUESTION, ()))
    (gen,) = policy.generate([req(n=2, max_new=context, stop=False, temperature=1.0)])
    for sample in gen.samples:
        assert len(sample.token_ids) <= context - prompt
        if sample.finish is Finish.LENGTH:
            assert len(sample.token_ids) == context - prompt


def test_num_parameters(policy):
    assert policy.num_parameters == sum(p.numel() for p in policy.model.parameters())


def test_from_model_wraps_a_loaded_model(policy):
    from prmsearch.policies.hf import HFPolicy

    wrapped = HFPolicy.from_model(policy.model, policy.tokenizer, prompt_format="plain",
                                  prefix_cache_tokens=0)
    r = req(n=2, seed=5)
    same_samples(wrapped.generate([r])[0], policy.generate([r])[0])


def test_config_validation(policy_dir):
    from prmsearch.policies.hf import HFPolicy, HFPolicyConfig

    with pytest.raises(ValueError, match="max_batch_tokens must be an int >= 1, got 0"):
        HFPolicyConfig(model="m", max_batch_tokens=0)
    with pytest.raises(ValueError, match="attn_implementation"):
        HFPolicyConfig(model="m", attn_implementation="flash_attention_2")
    with pytest.raises(ValueError, match="unknown prompt_format 'alpaca'"):
        HFPolicy(policy_dir, prompt_format="alpaca", device="cpu")
