"""The SGLang policy over HTTP against a real loopback server that imitates SGLang's native
``/generate``: a round is cut into bounded requests sent with bounded concurrency, a request
that times out is cancelled (its connection closed) and retried alone, outputs come back in
prompt order, and failures end in errors that say what to do.

The server (stdlib ``ThreadingHTTPServer`` on 127.0.0.1) answers each prompt of a request with
the step ``value <sampling_seed>`` followed by the delimiter, so every output can be traced back
to its prompt; it can delay or hang the requests that carry given seeds, break its answers, and
it counts requests per prompt, requests in flight and clients that hung up on it.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("httpx")

from prmsearch.arith.models import default_policy_path
from prmsearch.engines.http import ServerError, ServerTimeout
from prmsearch.policies.base import Finish, GenerationRequest, SamplingParams
from prmsearch.policies.sglang import SGLangHTTPOptions, SGLangPolicy

CACHED = 4
HANG_LIMIT_S = 10.0


class FakeSGLang:
    """A loopback ``/generate`` server in SGLang's native format (a list of prompts in
    ``input_ids`` is one batch and gets a list of outputs back)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.lock = threading.Lock()
        self.reset()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.serve(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        """Forget what was seen and behave again."""
        with self.lock:
            self.delay: dict[int, float] = {}  # seed -> seconds before answering its request
            self.hang: dict[int, int] = {}  # seed -> requests holding it left unanswered
            self.break_output: Callable[[dict[str, Any]], None] | None = None
            self.short: set[int] = set()  # first seeds of requests answered one output short
            self.hits: Counter[int] = Counter()  # seed -> requests that carried it
            self.sizes: list[int] = []  # prompts per request, in arrival order
            self.events: list[tuple[str, int]] = []  # (start | abort | answer, first seed)
            self.active = 0
            self.max_active = 0

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """Answer one request, late, never (until the client hangs up) or broken, as told."""
        seeds = [int(p["sampling_seed"]) for p in body["sampling_params"]]
        hang = self._start(seeds)
        try:
            if hang:
                if _client_left(handler.connection, HANG_LIMIT_S):
                    self._event("abort", seeds[0])
                return
            time.sleep(max(self.delay.get(s, 0.0) for s in seeds))
            outputs = [self.output(ids, seed) for ids, seed in zip(body["input_ids"], seeds, strict=True)]
            if seeds[0] in self.short:
                outputs.pop()
            self._event("answer", seeds[0])
            _send_json(handler, outputs)
        finally:
            with self.lock:
                self.active -= 1

    def _start(self, seeds: list[int]) -> bool:
        """Count the request; whether it is one to leave hanging."""
        with self.lock:
            self.hits.update(seeds)
            self.sizes.append(len(seeds))
            self.events.append(("start", seeds[0]))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            for seed in seeds:
                if self.hang.get(seed, 0) > 0:
                    self.hang[seed] -= 1
                    return True
        return False

    def _event(self, kind: str, seed: int) -> None:
        with self.lock:
            self.events.append((kind, seed))

    def output(self, ids: list[int], seed: int) -> dict[str, Any]:
        """One prompt's output: the step ``value <seed>`` and the delimiter, -0.25 per token."""
        gen = self.tokenizer(f"value {seed}\n\n", add_special_tokens=False)["input_ids"]
        out = {"text": f"value {seed}\n\n", "meta_info": {
            "prompt_tokens": len(ids), "cached_tokens": min(CACHED, len(ids)),
            "completion_tokens": len(gen), "finish_reason": {"type": "stop", "matched": "\n\n"},
            "output_token_logprobs": [[-0.25, t, None] for t in gen]}}
        if self.break_output is not None:
            self.break_output(out)
        return out


def _client_left(conn: socket.socket, limit: float) -> bool:
    """Wait until the client closes the connection (True) or ``limit`` seconds pass (False); how
    a server notices that a request was abandoned."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        readable, _, _ = select.select([conn], [], [], 0.01)
        if readable:
            try:
                return conn.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True
    return False


def _send_json(handler: BaseHTTPRequestHandler, data: Any) -> None:
    payload = json.dumps(data).encode()
    try:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from prmsearch.engines.loading import load_tokenizer

    return load_tokenizer(str(default_policy_path()))


@pytest.fixture(scope="module")
def fake(tokenizer) -> Iterator[FakeSGLang]:
    server = FakeSGLang(tokenizer)
    yield server
    server.close()


@pytest.fixture
def server(fake) -> FakeSGLang:
    fake.reset()
    return fake


FAST = {"timeout": 0.5, "max_retries": 2, "backoff": 0.01, "backoff_max": 0.05}


def _policy(server: FakeSGLang, retry: dict[str, Any] | None = None, **kw: Any) -> SGLangPolicy:
    return SGLangPolicy(default_policy_path(), base_url=server.url, retry={**FAST, **(retry or {})}, **kw)


def _requests(seeds: list[int], n: int) -> list[GenerationRequest]:
    return [GenerationRequest(f"Start with {i}. Add 2. What is the result?", (), n=n, seed=seed,
                              sampling=SamplingParams(max_new_tokens=16))
            for i, seed in enumerate(seeds)]


def _assert_in_order(gens, seeds: list[int], n: int) -> None:
    """Sample k of request i is the server's answer to the prompt seeded ``seeds[i] + k``."""
    assert len(gens) == len(seeds)
    for gen, seed in zip(gens, seeds, strict=True):
        assert [s.text for s in gen.samples] == [f"value {seed + k}" for k in range(n)]
        assert all(s.finish is Finish.STEP for s in gen.samples)
        # one -0.25 per kept token (the delimiter's dropped), summing to the sample's logprob
        assert all(s.token_logprobs == (-0.25,) * len(s.token_ids) for s in gen.samples)
        assert all(sum(s.token_logprobs) == s.logprob and s.token_ids for s in gen.samples)
        assert gen.prompt_tokens_cached == CACHED


def _wait_for(condition: Callable[[], bool], limit: float = 5.0) -> bool:
    deadline = time.monotonic() + limit
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_spans_cover_the_prompts_in_order():
    assert SGLangHTTPOptions(max_prompts_per_request=3).spans(7) == [(0, 3), (3, 6), (6, 7)]
    assert SGLangHTTPOptions().spans(0) == []
    assert SGLangHTTPOptions().spans(64) == [(0, 64)]


def test_round_is_split_and_sent_concurrently_up_to_the_bound(server):
    seeds = [100, 200, 300, 400]
    server.delay = {s + k: 0.3 for s in seeds for k in range(4)}
    policy = _policy(server, max_prompts_per_request=3, max_concurrency=2)
    gens = policy.generate(_requests(seeds, n=4))
    assert sorted(server.sizes) == [1, 3, 3, 3, 3, 3]  # 16 prompts in requests of at most 3
    assert server.max_active == 2  # concurrent, and never more than the bound
    assert set(server.hits.values()) == {1} and len(server.hits) == 16  # each prompt sent once
    _assert_in_order(gens, seeds, n=4)


def test_results_keep_prompt_order_when_later_requests_finish_first(server):
    seeds = [10, 20, 30]
    server.delay = {10: 0.4, 11: 0.4, 20: 0.2, 21: 0.2}  # the first request answers last
    gens = _policy(server, max_prompts_per_request=2, max_concurrency=3).generate(_requests(seeds, n=2))
    answered = [seed for kind, seed in server.events if kind == "answer"]
    assert answered == [30, 20, 10]
    _assert_in_order(gens, seeds, n=2)


def test_a_timed_out_request_is_cancelled_and_retried_alone(server):
    seeds = [10, 20, 30]
    server.hang = {20: 1}  # the second request hangs once
    policy = _policy(server, retry={"backoff": 0.2}, max_prompts_per_request=2, max_concurrency=3)
    gens = policy.generate(_requests(seeds, n=2))
    _assert_in_order(gens, seeds, n=2)
    assert server.hits == Counter({10: 1, 11: 1, 20: 2, 21: 2, 30: 1, 31: 1})
    # the client hung up on the first attempt (SGLang aborts such a request) before the retry
    assert [kind for kind, seed in server.events if seed == 20] == ["start", "abort", "start", "answer"]


def test_a_server_that_keeps_timing_out_gives_a_clear_error(server):
    server.hang = {20: 99}
    policy = _policy(server, retry={"timeout": 0.3, "max_retries": 1}, max_prompts_per_request=2)
    start = time.monotonic()
    with pytest.raises(ServerTimeout) as info:
        policy.generate(_requests([10, 20, 30], n=2))
    assert time.monotonic() - start < 5
    message = str(info.value)
    assert server.url in message and "0.3s" in message and "2 attempts" in message
    assert "retry={'timeout': <seconds>}" in message and "max_prompts_per_request" in message
    # the server counts a request when its handler thread reads it, which on a loaded machine
    # can come after the client has given up on that attempt: wait for the count, then check it
    assert _wait_for(lambda: server.hits[20] == 2)
    assert server.hits[20] == 2 and server.hits[10] == 1 and server.hits[30] == 1
    # every abandoned attempt was hung up on: nothing keeps running on the server
    assert _wait_for(lambda: sum(kind == "abort" for kind, _ in server.events) == 2)


def _drop_logprobs(out):
    del out["meta_info"]["output_token_logprobs"]


def _bad_triple(out):
    out["meta_info"]["output_token_logprobs"][0] = [-0.25]


def _finish_as_text(out):
    out["meta_info"]["finish_reason"] = "stop"


def _no_meta(out):
    del out["meta_info"]


@pytest.mark.parametrize(("breaker", "field"), [
    (_drop_logprobs, "meta_info.output_token_logprobs is missing"),
    (_bad_triple, r"meta_info.output_token_logprobs[0] is not a [logprob, token_id, text] triple"),
    (_finish_as_text, "meta_info.finish_reason is not an object"),
    (_no_meta, "meta_info is missing"),
])
def test_a_malformed_answer_is_an_error_naming_the_field(server, breaker, field):
    server.break_output = breaker
    with pytest.raises(ServerError) as info:
        _policy(server, retry={"max_retries": 1}).generate(_requests([10], n=2))
    assert field in str(info.value) and f"{server.url}/generate" in str(info.value)
    assert server.hits[10] == 2  # a malformed answer is retried, then fails


def test_a_wrong_number_of_outputs_is_an_error(server):
    server.short = {20}
    with pytest.raises(ServerError, match=r"returned 2 outputs for the 3 prompts 3\.\.5 of one request"):
        _policy(server, max_prompts_per_request=3).generate(_requests([10, 20], n=3))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_prompts_per_request": 0}, "max_prompts_per_request must be an int >= 1, got 0"),
    ({"max_concurrency": "4"}, "max_concurrency must be an int >= 1, got '4'"),
    ({"max_concurrency": True}, "max_concurrency must be an int >= 1, got True"),
    ({"retry": {"max_concurrency": 4}}, "pass max_concurrency=4 to the policy"),
])
def test_options_are_validated(server, kwargs, message):
    with pytest.raises(ValueError) as info:
        SGLangPolicy(default_policy_path(), base_url=server.url, **kwargs)
    assert message in str(info.value)


def test_the_policy_sets_the_concurrency_of_a_given_retry_policy(server):
    from prmsearch.engines.http import RetryPolicy

    policy = SGLangPolicy(default_policy_path(), base_url=server.url, max_concurrency=3,
                          retry=RetryPolicy(timeout=7.0, max_concurrency=32))
    assert (policy.retry.timeout, policy.retry.max_concurrency) == (7.0, 3)
