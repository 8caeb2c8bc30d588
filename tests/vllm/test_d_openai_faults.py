"""The OpenAI-compatible policy against a fault-injecting local server: retries, then clear errors;
a per-problem failure leaves the other problems' results intact; nothing hangs."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fault_server import FaultServer

from prmsearch.engines.http import ServerError
from prmsearch.policies.base import Finish, GenerationRequest, SamplingParams
from prmsearch.policies.openai import OpenAIPolicy, OpenAIPolicyConfig
from prmsearch.scorers.base import StepScores

FAST = {"timeout": 0.5, "max_retries": 2, "backoff": 0.01, "backoff_max": 0.05, "max_concurrency": 4}
Q = "Start with 3. Add 4. What is the result?"


class HalfScorer:
    """Every step scores 0.5 (the fault tests are about the policy)."""

    num_parameters = 0

    def score(self, requests):
        return [StepScores(np.full(len(r.steps), 0.5)) for r in requests]


@pytest.fixture(scope="module")
def fault():
    server = FaultServer()
    yield server
    server.close()


def _policy(fault, **kw) -> OpenAIPolicy:
    return OpenAIPolicy(fault.url, "fake", **{**FAST, **kw})


def _req(n: int = 2, question: str = Q) -> GenerationRequest:
    return GenerationRequest(question, (), n=n, sampling=SamplingParams(max_new_tokens=16), seed=5)


def test_generates_steps_with_usage_counts(fault):
    fault.reset()
    gen = _policy(fault).generate([_req(3)])[0]
    assert [s.text for s in gen.samples] == [f"step 1 variant {k}" for k in range(3)]
    assert all(s.finish is Finish.STEP for s in gen.samples)
    assert gen.samples[0].logprob == pytest.approx(-0.4)
    assert (gen.prompt_tokens_computed, gen.prompt_tokens_cached) == (len(Q.split()) - 2, 2)
    assert gen.tokens_generated == 12
    body = fault.requests[0]
    assert body["n"] == 3 and body["stop"] == ["\n\n"] and body["seed"] == 5 and body["logprobs"] == 0


def test_token_logprobs_without_token_ids_are_kept_only_when_they_line_up(fault, policy_dir):
    fault.reset()
    gen = _policy(fault).generate([_req(2)])[0]  # no tokenizer: no ids to align them with
    assert all(s.token_ids == () and s.token_logprobs == () for s in gen.samples)
    policy = _policy(fault, tokenizer=str(policy_dir))
    gen = policy.generate([_req(2)])[0]  # the server's 4 words against the tokenizer's 15 tokens
    assert all(len(s.token_ids) == 15 and s.token_logprobs == () for s in gen.samples)
    tok = policy.tokenizer
    fault.tokenize = lambda text: [tok.decode([i]) for i in tok(text, add_special_tokens=False)["input_ids"]]
    gen = policy.generate([_req(2)])[0]  # the server's tokens are the tokenizer's: one value each
    for s in gen.samples:
        assert len(s.token_logprobs) == len(s.token_ids) == 15
        assert s.token_logprobs[:4] == pytest.approx((-0.1, -0.2, -0.3, -0.1))
        assert sum(s.token_logprobs) == pytest.approx(s.logprob, abs=1e-12)
    fault.reset()


def test_500_is_retried_then_succeeds(fault):
    fault.reset(fail_first=2)
    gen = _policy(fault).generate([_req()])[0]
    assert len(gen.samples) == 2 and len(fault.requests) == 3


def test_500_forever_is_a_clear_error(fault):
    fault.reset("500")
    with pytest.raises(ServerError, match=r"failed after 3 attempts; last error: HTTP 500"):
        _policy(fault).generate([_req()])
    assert len(fault.requests) == 3


def test_malformed_json_is_retried_then_a_clear_error(fault):
    fault.reset("malformed")
    with pytest.raises(ServerError, match="malformed JSON"):
        _policy(fault).generate([_req()])
    assert len(fault.requests) == 3


def test_a_hung_request_times_out(fault):
    fault.reset("hang")
    start = time.monotonic()
    with pytest.raises(ServerError, match="timed out"):
        _policy(fault, max_retries=1).generate([_req()])
    assert time.monotonic() - start < 2.5


def test_a_dead_server_is_a_clear_error():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "fake", **FAST)
    with pytest.raises(ServerError, match="connection failed"):
        policy.generate([_req()])


def test_server_ignoring_n_is_topped_up_and_split_from_then_on(fault):
    fault.reset("one_choice")
    policy = _policy(fault)
    gen = policy.generate([_req(3)])[0]
    assert len(gen.samples) == 3 and policy.splits_n
    # the n=3 call (seed 5) gave sample 0; samples 1 and 2 were asked alone with seeds 6 and 7
    sent = [(b["n"], b["seed"]) for b in fault.requests]
    assert sent[0] == (3, 5) and sorted(sent[1:]) == [(1, 6), (1, 7)]  # the top-ups run concurrently
    fault.reset("one_choice")
    policy.generate([_req(3)])
    assert sorted((b["n"], b["seed"]) for b in fault.requests) == [(1, 5), (1, 6), (1, 7)]


def test_per_problem_error_while_the_run_goes_on(fault):
    from prmsearch.api import Searcher

    fault.reset()
    searcher = Searcher(_policy(fault), HalfScorer(), "beam", n=4, width=2, max_depth=6)
    questions = [Q, "POISON: Start with 1. Add 1. What is the result?", "Start with 2. Add 2. What?"]
    results = searcher.run(questions)
    assert results[1].error is not None and "ServerError" in results[1].error
    for r in (results[0], results[2]):
        assert r.error is None and r.answer in ("7", "8")
        assert r.ledger.prompt_tokens_cached > 0


def test_api_key_goes_in_the_header_only(fault, monkeypatch):
    monkeypatch.setenv("PRMSEARCH_TEST_KEY", "sk-secret-123")
    fault.reset()
    policy = _policy(fault, api_key_env="PRMSEARCH_TEST_KEY")
    policy.generate([_req(1)])
    assert fault.headers[0].get("Authorization") == "Bearer sk-secret-123"
    assert "sk-secret" not in repr(policy) and "sk-secret" not in repr(policy.config)
    fault.reset("500")
    with pytest.raises(ServerError) as info:
        policy.generate([_req(1)])
    assert "sk-secret" not in str(info.value)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="n_mode must be one of"):
        OpenAIPolicyConfig("http://x/v1", "m", n_mode="sometimes")
    with pytest.raises(ValueError, match="base_url"):
        OpenAIPolicyConfig("localhost:8000", "m")
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIPolicyConfig("http://x/v1", "m", max_retries=-1)
    with pytest.raises(ValueError, match="chat template"):
        OpenAIPolicy("http://x/v1", "m", prompt_format="chat")


def test_concurrent_calls_share_one_pool_and_its_concurrency_limit(fault):
    import threading

    fault.reset()
    fault.delay_s = 0.02
    policy = _policy(fault, max_concurrency=3)
    out: list = []
    threads = [threading.Thread(target=lambda: out.append(policy.generate([_req(1), _req(1)])))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert len(out) == 8 and len(fault.requests) == 16
    assert fault.most_in_flight == 3  # the limit holds across the 8 callers together
    assert len(fault.connections) <= 3  # ... over at most that many kept-alive connections
    policy.close()
    assert policy.generate([_req(1)])[0].samples  # a closed policy opens new connections


def test_a_policy_pickles_without_its_connections(fault):
    import pickle

    fault.reset()
    policy = _policy(fault)
    policy.generate([_req(1)])
    copy = pickle.loads(pickle.dumps(policy))
    assert copy.generate([_req(2)])[0].samples[1].text == "step 1 variant 1"


def test_async_and_lock_step_runs_give_the_same_results_over_http(fault):
    from prmsearch.api import Searcher

    fault.reset()
    fault.delay_s = 0.005
    questions = [Q, "Start with 1. Add 1. What is the result?", "Start with 2. Add 2. What?"]
    runs = {}
    for schedule in ("rounds", "async"):
        searcher = Searcher(_policy(fault), HalfScorer(), "beam", n=4, width=2, max_depth=6,
                            schedule=schedule)
        runs[schedule] = (searcher.run(questions), searcher.last_stats)
    (lock, lock_stats), (flow, flow_stats) = runs["rounds"], runs["async"]
    assert [r.tree for r in lock] == [r.tree for r in flow]
    assert [r.ledger.to_dict() | {"wall_s": 0} for r in lock] == \
        [r.ledger.to_dict() | {"wall_s": 0} for r in flow]
    assert flow_stats.policy_batches == 3 * lock_stats.policy_batches  # one call per problem
