"""``prmsearch serve`` with the policy on the vLLM CPU engine, through the official openai client.

The engine runs inside the server process (the slot holds that process, so no other engine runs
beside it); the PRM is the embedded one. Concurrent requests share the engine (its engine loop) and
must get the answers each one gets alone.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_process import ServeProcess  # noqa: E402

from prmsearch.arith.problems import load_split  # noqa: E402

PLUGIN = Path(__file__).with_name("serve_vllm_plugin.py")


@pytest.fixture
def vllm_server(slot, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve_vllm") / "serve.log"
    return slot.get("serve-vllm", lambda: ServeProcess(
        ["--policy", "vllm-arith", "--budgets", "4"], log, plugin=PLUGIN, start_s=240.0))


@pytest.mark.time_limit(400)
def test_serve_on_the_vllm_engine_answers_concurrent_clients(vllm_server):
    questions = [p.question for p in load_split("test", 6)]
    with openai.OpenAI(base_url=vllm_server.url, api_key="none", max_retries=0, timeout=180) as client:
        assert "beam-4" in [m.id for m in client.models.list().data]

        def ask(question: str) -> str:
            messages = [{"role": "user", "content": question}]
            reply = client.chat.completions.create(model="beam-4", messages=messages)
            assert reply.usage.completion_tokens > 0
            return reply.choices[0].message.content

        alone = [ask(q) for q in questions]
        together: dict[int, str] = {}
        threads = [threading.Thread(target=lambda i=i, q=q: together.__setitem__(i, ask(q)))
                   for i, q in enumerate(questions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert [together[i] for i in range(len(questions))] == alone
        stream = client.chat.completions.create(model="beam-4", stream=True,
                                                messages=[{"role": "user", "content": questions[0]}])
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == alone[0]
    assert vllm_server.health()["failed"] == 0
