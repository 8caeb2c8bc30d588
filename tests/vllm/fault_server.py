"""A tiny fault-injecting OpenAI-style ``/v1/completions`` server on 127.0.0.1 (a thread).

It answers the plain arithmetic-style prompt ``question\\n\\n step\\n\\n ...`` with canned steps
(``step 1``, ``step 2``, then a boxed answer) and can misbehave on demand:

* ``fail_first``: the first k requests get HTTP 500;
* ``mode``: ``"ok"``, ``"500"`` (always), ``"malformed"`` (invalid JSON), ``"hang"`` (sleeps
  ``hang_s`` before answering), ``"one_choice"`` (ignores ``n``);
* prompts containing ``POISON`` always get HTTP 500 (a per-problem failure);
* ``delay_s``: every answer waits that long; ``most_in_flight`` and ``connections`` record how
  many requests were served at once and over how many client connections;
* ``tokenize``: how a completion's text is split into its logprob tokens (by default at spaces,
  each at -0.1; given a function, its pieces, at -0.1, -0.2, -0.3, -0.1, ...).

``POST .../pooling`` answers like a vLLM pooling server running a ``qwen-prm`` PRM with
``task: "token_classify"``: one row ``[1 - p, p]`` per ``step_tag_id`` token of every input id
list, ``p`` a fixed function of the ids up to that tag. The same ``fail_first`` and ``mode``
(``"500"``, ``"malformed"``, ``"hang"``) apply, plus ``"short_rows"`` (one row too few),
``"not_probabilities"`` (raw logits) and ``"missing_item"`` (one input left unanswered); an input
holding ``poison_token`` gets HTTP 500 (a per-problem failure).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FaultServer:
    def __init__(self) -> None:
        self.mode = "ok"
        self.fail_first = 0
        self.hang_s = 3.0
        self.step_tag_id = 159  # <extra_0> in the shipped arithmetic tokenizer
        self.poison_token: int | None = None
        self.delay_s = 0.0  # every answer waits this long (so that requests overlap)
        self.tokenize: Callable[[str], list[str]] | None = None  # None: split at spaces
        self.in_flight = self.most_in_flight = 0
        self.connections: set[tuple[str, int]] = set()  # client (host, port) pairs seen
        self.open_sockets: set[Any] = set()  # kept-alive connections, cut when the server closes
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers

            def setup(self) -> None:
                super().setup()
                with outer._lock:
                    outer.open_sockets.add(self.connection)

            def finish(self) -> None:
                with outer._lock:
                    outer.open_sockets.discard(self.connection)
                super().finish()

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(size) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    outer.headers.append(dict(self.headers))
                    count = len(outer.requests)
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                    outer.connections.add(self.client_address)
                try:
                    time.sleep(outer.delay_s)
                    status, payload = outer.answer(body, count, self.path)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1
                if status == -1:  # hang: answer late (the client has given up by then)
                    time.sleep(outer.hang_s)
                    late = outer.pooling(body) if _is_pooling(self.path) else outer.completion(body)
                    status, payload = 200, json.dumps(late).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reset(self, mode: str = "ok", fail_first: int = 0) -> None:
        with self._lock:
            self.mode, self.fail_first = mode, fail_first
            self.poison_token = None
            self.delay_s, self.most_in_flight = 0.0, 0
            self.tokenize = None
            self.connections.clear()
            self.requests.clear()
            self.headers.clear()

    def answer(self, body: dict[str, Any], count: int, path: str = "/v1/completions") -> tuple[int, bytes]:
        if _is_pooling(path):
            return self.pooling_answer(body, count)
        prompt = body.get("prompt", "")
        if "POISON" in str(prompt) or self.mode == "500" or count <= self.fail_first:
            return 500, b'{"error": "injected failure"}'
        if self.mode == "malformed":
            return 200, b'{"choices": [{"text": "trunc'
        if self.mode == "hang":
            return -1, b""
        return 200, json.dumps(self.completion(body)).encode()

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = str(body.get("prompt", ""))
        depth = prompt.count("\n\n")  # the question's own blank line counts once
        n = 1 if self.mode == "one_choice" else int(body.get("n", 1))
        choices = []
        for k in range(n):
            if depth >= 3:
                text, reason = f"so the answer is \\boxed{{{7 + k % 2}}}", "stop"
            else:
                text, reason = f"step {depth} variant {k}", "stop"
            if self.tokenize is None:
                tokens, gap, logprobs = text.split(" "), 1, [-0.1] * len(text.split(" "))
            else:
                tokens, gap = self.tokenize(text), 0
                logprobs = [-0.1 * (1 + i % 3) for i in range(len(tokens))]
            offsets, pos = [], 0
            for t in tokens:
                offsets.append(pos)
                pos += len(t) + gap
            choices.append({
                "index": k, "text": text, "finish_reason": reason, "stop_reason": "\n\n",
                "logprobs": {"tokens": tokens, "token_logprobs": logprobs, "text_offset": offsets},
            })
        prompt_tokens = len(prompt.split())
        return {"choices": choices, "usage": {"prompt_tokens": prompt_tokens,
                                              "completion_tokens": 4 * n,
                                              "prompt_tokens_details": {"cached_tokens": 2}}}

    def pooling_answer(self, body: dict[str, Any], count: int) -> tuple[int, bytes]:
        inputs = body.get("input", [])
        poisoned = self.poison_token is not None and any(self.poison_token in ids for ids in inputs)
        if poisoned or self.mode == "500" or count <= self.fail_first:
            return 500, b'{"error": "injected failure"}'
        if self.mode == "malformed":
            return 200, b'{"data": [{"index": 0, "data": [[0.1, 0.'
        if self.mode == "hang":
            return -1, b""
        return 200, json.dumps(self.pooling(body)).encode()

    def pooling(self, body: dict[str, Any]) -> dict[str, Any]:
        items = []
        for k, ids in enumerate(body.get("input", [])):
            rows = []
            for end, token in enumerate(ids, start=1):
                if token == self.step_tag_id:
                    p = 0.05 + 0.9 * (sum(ids[:end]) % 101) / 100
                    rows.append([3.0, -2.0] if self.mode == "not_probabilities" else [1.0 - p, p])
            if self.mode == "short_rows":
                rows = rows[:-1]
            items.append({"index": k, "object": "pooling", "data": rows})
        if self.mode == "missing_item":
            items = items[:-1]
        tokens = sum(len(ids) for ids in body.get("input", []))
        return {"id": "pool-fake", "object": "list", "model": body.get("model") or "fake",
                "data": items, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def close(self) -> None:
        """Stop like a dead process: no new connections, and the kept-alive ones cut."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._lock:
            sockets, self.open_sockets = list(self.open_sockets), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _is_pooling(path: str) -> bool:
    return path.rstrip("/").endswith("/pooling")
