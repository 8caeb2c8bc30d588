"""The SGLang policy: the offline engine needs a CUDA GPU (skipped here); the native ``/generate``
HTTP path is checked against a small fake server that answers in SGLang's documented format."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prmsearch.policies.base import Finish, GenerationRequest, SamplingParams


def test_offline_engine_on_a_gpu(policy_dir):
    pytest.importorskip("sglang", reason="SGLang runs on CUDA GPUs only (its CPU build targets "
                                         "Intel AMX and is source-only); not installable here")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("SGLang's offline Engine needs a CUDA GPU")
    from prmsearch.policies.sglang import SGLangPolicy

    policy = SGLangPolicy(policy_dir, context_length=256)
    try:
        gen = policy.generate([GenerationRequest("Start with 2. Add 3. What is the result?", (), n=2,
                                                 sampling=SamplingParams(max_new_tokens=32), seed=1)])
        assert len(gen[0].samples) == 2
    finally:
        policy.close()


@pytest.fixture
def fake_sglang(hf_policy):
    tok = hf_policy.tokenizer
    step = tok("12 * 2 = 24", add_special_tokens=False)["input_ids"]
    delim = tok("\n\n", add_special_tokens=False)["input_ids"]
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            outs = []
            for ids in body["input_ids"]:
                gen = step + delim
                outs.append({"text": "12 * 2 = 24", "meta_info": {
                    "prompt_tokens": len(ids), "cached_tokens": 16, "completion_tokens": len(gen),
                    "finish_reason": {"type": "stop", "matched": "\n\n"},
                    "output_token_logprobs": [[-0.5, t, None] for t in gen]}})
            payload = json.dumps(outs).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen, len(step)
    httpd.shutdown()
    httpd.server_close()


def test_native_http_generate(fake_sglang, policy_dir, hf_policy, questions):
    from prmsearch.policies.sglang import SGLangPolicy

    url, seen, step_len = fake_sglang
    policy = SGLangPolicy(policy_dir, base_url=url, retry={"timeout": 5.0, "max_retries": 1})
    reqs = [GenerationRequest(q, (), n=3, sampling=SamplingParams(max_new_tokens=32), seed=9)
            for q in questions[:2]]
    gens = policy.generate(reqs)
    assert len(seen) == 1  # one batched call for the whole round
    body = seen[0]
    assert len(body["input_ids"]) == 6 and body["return_logprob"] is True
    assert body["input_ids"][0] == hf_policy.prompt_ids(questions[0], [])
    assert [p["sampling_seed"] for p in body["sampling_params"][:3]] == [9, 10, 11]
    assert body["sampling_params"][0]["stop"] == ["\n\n"]
    for req, gen in zip(reqs, gens, strict=True):
        assert len(gen.samples) == 3
        for s in gen.samples:
            assert (s.text, s.finish) == ("12 * 2 = 24", Finish.STEP)
            assert len(s.token_ids) == step_len and s.logprob == pytest.approx(-0.5 * step_len)
            assert s.token_logprobs == (-0.5,) * step_len  # the delimiter's value dropped with it
        assert gen.prompt_tokens_cached == 16
        assert gen.prompt_tokens_computed == len(hf_policy.prompt_ids(req.question, [])) - 16
