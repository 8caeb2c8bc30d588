"""``prmsearch serve`` through the official ``openai`` client and raw HTTP, on a real server process.

The server (conftest.py) runs the embedded models behind the ``flaky-arith`` policy with a key.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from serve_process import API_KEY

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

QUESTION = "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?"
OTHERS = [
    "Start with 9. Add 4. Multiply by 2. Subtract 6. What is the result?",
    "Begin with 15. Then double it. Take away 5. What do you get?",
    "Start with 3. Multiply by 4. Add 8. Subtract 2. What is the result?",
]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120.0) as c:
        yield c


def raw(server, path: str, body, key: str | None = API_KEY, timeout: float = 120.0) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(f"{server.url}{path}", content=content, headers={**headers, "Content-Type":
                      "application/json"}, timeout=timeout)


def test_models_list_strategies_at_each_budget_and_the_policy(client):
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == "flaky-arith"
    assert {"beam-4", "beam-16", "best_of_n-16", "particle_filter-4", "mcts-16"} <= set(ids)
    assert "greedy-4" not in ids  # plain decoding is the policy's own id
    assert "planner-4" in ids and "planner-16" in ids  # a planner lists only its plan's levels
    card = client.models.retrieve("dvts-48")  # any budget works, listed or not
    assert card.id == "dvts-48"
    with pytest.raises(openai.NotFoundError, match="GET /v1/models lists them"):
        client.models.retrieve("gpt-4o")


def test_chat_answer_is_the_same_search_as_in_process(client):
    import prmsearch

    reply = client.chat.completions.create(model="beam-16", messages=user(QUESTION))
    local = prmsearch.solve(QUESTION, strategy="beam", n=16, seed=0)
    choice = reply.choices[0]
    assert choice.message.content == local.text
    assert choice.finish_reason == "stop"
    facts = choice.model_extra["prmsearch"]
    assert facts["answer"] == local.answer
    assert facts["steps"] == list(local.steps)
    assert facts["step_scores"] == pytest.approx(list(local.step_scores))
    ledger = reply.usage.model_extra["prmsearch"]
    assert reply.usage.completion_tokens == local.ledger.generated_tokens == ledger["generated_tokens"]
    assert ledger["prm_tokens_computed"] == local.ledger.prm_tokens_computed
    assert reply.model_extra["prmsearch"]["strategy"] == "beam"
    assert reply.model_extra["prmsearch"]["options"]["n"] == 16


def test_search_options_from_extra_body_and_n_choices(client):
    reply = client.chat.completions.create(
        model="beam-16",
        messages=[{"role": "system", "content": "You are terse."}, {"role": "user", "content": QUESTION}],
        n=3,
        extra_body={"strategy": "best_of_n", "budget": 8, "aggregation": "last", "temperature": 0.3},
    )
    facts = reply.model_extra["prmsearch"]
    assert facts["strategy"] == "best_of_n"
    assert facts["options"]["n"] == 8 and facts["options"]["aggregation"] == "last"
    assert facts["ignored"] == ["temperature"]  # a chat client's sampling temperature is not the search's
    assert 1 <= len(reply.choices) <= 3
    texts = [c.message.content for c in reply.choices]
    assert len(set(texts)) == len(texts)  # distinct solutions
    scores = [c.model_extra["prmsearch"]["score"] for c in reply.choices[1:]]
    assert scores == sorted(scores, reverse=True)
    nested = client.chat.completions.create(
        model="particle_filter-4", messages=user(QUESTION),
        extra_body={"prmsearch": {"temperature": 2.0}},
    )
    assert nested.model_extra["prmsearch"]["options"]["temperature"] == 2.0


def test_the_planner_serves_its_plan_and_says_where_it_went(client):
    from prmsearch.planner.plan import DEFAULT_PLAN, Plan

    reply = client.chat.completions.create(model="planner-8", messages=user(QUESTION))
    facts = reply.model_extra["prmsearch"]
    assert Plan.from_dict(facts["options"]["plan"]) == Plan.from_dict(DEFAULT_PLAN)  # the plan as JSON
    (search,) = facts["searches"]
    assert set(search["report"]) == {"bin", "difficulty", "arm"}
    assert reply.choices[0].model_extra["prmsearch"]["answer"] == search["answer"]


def test_completions_take_a_list_of_prompts(client):
    reply = client.completions.create(model="best_of_n-4", prompt=[QUESTION, OTHERS[0]], n=2)
    indices = sorted(c.index for c in reply.choices)
    assert set(indices) <= {0, 1, 2, 3} and {0, 2} <= set(indices)
    searches = reply.model_extra["prmsearch"]["searches"]
    assert len(searches) == 2
    assert reply.usage.completion_tokens > 0


def test_stream_gives_the_same_answer_in_openai_chunks(client):
    messages = [{"role": "user", "content": OTHERS[1]}]
    whole = client.chat.completions.create(model="beam-4", messages=messages)
    stream = client.chat.completions.create(model="beam-4", messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    content, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert content == whole.choices[0].message.content
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="beam-4", prompt=OTHERS[1], stream=True) if c.choices)
    assert text == content


def test_plain_decoding_under_the_policy_id(client):
    reply = client.chat.completions.create(model="flaky-arith", messages=user(QUESTION))
    assert reply.model_extra["prmsearch"]["strategy"] == "greedy"
    assert reply.choices[0].message.content


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "beam-16", "messages": [{"role": "user", "content": QUESTION}], "strategy": "bogus"},
         400, "unknown strategy 'bogus'"),
        ({"model": "beam-16", "messages": [{"role": "user", "content": QUESTION}], "width": 5},
         400, "width"),
        ({"model": "beam-16", "messages": []}, 400, "'messages' is empty"),
        ({"model": "beam-16", "messages": [{"role": "user", "content": "   "}]}, 400, "content is empty"),
        ({"model": "beam-16", "messages": [{"role": "system", "content": "hi"}]}, 400, "no user message"),
        ({"model": "beam-16"}, 422, "'messages' is required"),
        ({"model": "beam-16", "messages": "What is 2+3?"}, 422, "must be a list"),
        ({"model": "nope-16", "messages": [{"role": "user", "content": QUESTION}]}, 404, "does not exist"),
        ({"model": "beam-16", "messages": [{"role": "user", "content": QUESTION}], "frobnicate": 1},
         400, "unrecognized request argument 'frobnicate'"),
        ({"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}], "n": 5},
         400, "at most 4"),
        ({"model": "beam-16", "messages": [{"role": "user", "content": QUESTION}], "logprobs": True},
         400, "not supported"),
        ({"model": "beam-16", "messages": [{"role": "user", "content": "Add 1. " * 200}]},
         400, "maximum context length"),
        ({"model": "beam-16", "messages": [{"role": "user", "content": "x" * 40_000}]}, 400, "characters"),
    ],
)
def test_bad_requests_get_openai_error_bodies(server, body, status, words):
    reply = raw(server, "/chat/completions", body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert words in error["message"]
    assert error["type"] and "message" in error


def test_malformed_json_and_the_official_clients_errors(server, client):
    assert raw(server, "/chat/completions", "{not json").status_code == 400
    with pytest.raises(openai.BadRequestError, match="multiple of"):
        client.chat.completions.create(model="beam-16", messages=user(QUESTION),
                                       extra_body={"width": 5})
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="beam-16", messages=user("Add 1. " * 200))
    assert info.value.code == "context_length_exceeded"


def test_absurd_budgets_and_hostile_json_are_400s_on_a_live_connection(server):
    """The faults issue's 500s and its runaway request: a budget of a billion (it grew the server to
    24 GB), a lone surrogate and 100,000-deep nesting are each a 400 naming the problem, and the
    same keep-alive connection then answers the next request."""
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    hostile = [
        (json.dumps({"model": "best_of_n-4", "messages": user(QUESTION), "budget": 1_000_000_000}),
         "cap of 256"),
        ('{"model": "beam-4", "messages": [{"role": "user", "content": "\\ud800"}]}',
         "lone UTF-16 surrogate"),
        ('{"model": "beam-4", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (json.dumps({"model": "beam-4", "messages": user(QUESTION), "prmsearch": {"budget": 260}}),
         "cap of 256"),
    ]
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as http:
        for body, words in hostile:
            reply = http.post("/chat/completions", content=body)
            assert reply.status_code == 400, reply.text
            assert words in reply.json()["error"]["message"]
        good = json.dumps({"model": "beam-4", "messages": user(QUESTION)})
        ok = http.post("/chat/completions", content=good)
        assert ok.status_code == 200
    assert "Traceback" not in server.log.read_text()
    assert httpx.get(f"{server.base}/health").status_code == 200


def test_the_key_is_required_and_never_echoed(server):
    body = {"model": "beam-4", "messages": [{"role": "user", "content": QUESTION}]}
    for key in (None, "wrong-key"):
        reply = raw(server, "/chat/completions", body, key=key)
        assert reply.status_code == 401
        assert API_KEY not in reply.text
    assert httpx.get(f"{server.base}/health").status_code == 200  # health needs no key
    with openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0) as bad, \
            pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert API_KEY not in server.log.read_text()


def test_a_failing_backend_is_a_503_and_the_next_request_works(client, server):
    with pytest.raises(openai.InternalServerError, match="backend failure on purpose"):
        client.chat.completions.create(model="beam-4", messages=user("BREAK " + QUESTION))
    reply = client.chat.completions.create(model="beam-4", messages=user(QUESTION))
    assert reply.choices[0].message.content
    stream = raw(server, "/chat/completions", {"model": "beam-4", "stream": True,
                                              "messages": [{"role": "user", "content": "BREAK it"}]})
    assert stream.status_code == 200 and "backend failure on purpose" in stream.text
    assert stream.text.rstrip().endswith("data: [DONE]")


def test_concurrent_clients_get_their_own_answers(client):
    questions = [QUESTION, *OTHERS] * 2
    alone = {q: client.chat.completions.create(model="beam-4", messages=user(q))
             .choices[0].message.content for q in set(questions)}
    answers: dict[int, str] = {}
    errors: list[BaseException] = []

    def ask(i: int, q: str) -> None:
        try:
            reply = client.chat.completions.create(model="beam-4", messages=user(q))
            answers[i] = reply.choices[0].message.content
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i, q)) for i, q in enumerate(questions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert [answers[i] for i in range(len(questions))] == [alone[q] for q in questions]


def test_a_client_that_disconnects_has_its_work_dropped_not_others(server, client):
    slow = {"model": "beam-64", "prompt": [f"Start with {i}. Add 5. Multiply by 3. Subtract 4. What is the "
                                           "result?" for i in range(2, 18)]}
    result: dict[str, str] = {}

    def other() -> None:
        reply = client.chat.completions.create(model="beam-4", messages=user(QUESTION))
        result["answer"] = reply.choices[0].message.content

    before = server.health()["served"]
    with pytest.raises(httpx.ReadTimeout):
        raw(server, "/completions", slow, timeout=1.5)
    thread = threading.Thread(target=other)
    thread.start()
    deadline = time.monotonic() + 30
    while server.health()["pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    thread.join(60)
    health = server.health()
    assert health["pending"] == 0
    assert result["answer"]
    assert health["served"] <= before + 1  # the dropped prompts were never served


def test_a_stream_sends_progress_comments_while_it_searches(server):
    body = {"model": "beam-16", "stream": True, "prompt": [QUESTION, *OTHERS]}
    lines = []
    with httpx.stream("POST", f"{server.url}/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in reply.iter_lines() if line]
    marker = ": progress "
    progress = [json.loads(line.removeprefix(marker)) for line in lines if line.startswith(marker)]
    assert progress, lines[:5]
    assert progress[-1]["questions"] == 4 and progress[-1]["nodes"] >= 4
    data = [line for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in data[:-1]]
    assert {c["choices"][0]["index"] for c in chunks if c["choices"]} == {0, 1, 2, 3}
    assert "step_score" in chunks[0]["choices"][0]["prmsearch"]


def test_a_stream_closed_mid_search_drops_its_work(server):
    prompts = [f"Start with {i}. Add 3. Multiply by 2. Subtract 1. What is the result?" for i in range(3, 51)]
    slow = {"model": "beam-64", "stream": True, "prompt": prompts}
    before = server.health()
    with httpx.stream("POST", f"{server.url}/completions", json=slow, timeout=60,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as reply:
        lines = reply.iter_lines()
        assert next(lines) == ": searching"
        deadline = time.monotonic() + 10
        while server.health()["pending"] < len(prompts) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.health()["pending"] == len(prompts)
    closed = time.monotonic()
    deadline = closed + 30
    while server.health()["pending"] and time.monotonic() < deadline:
        time.sleep(0.1)
    after = server.health()
    # Dropped, not searched to the end: nothing pending within the deadline, and none of the
    # 48 prompts counted as served. (No wall-clock bound: cancelling lands at the end of a round,
    # and a round's length depends on the machine's load.)
    assert after["pending"] == 0
    assert after["served"] == before["served"]
