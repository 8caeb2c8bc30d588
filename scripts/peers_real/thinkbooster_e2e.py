"""ThinkBooster 0.1.1 end to end on the real 0.5B policy, for the side-by-side (beam and best-of-N;
ThinkBooster has no particle filter).

Policy: Qwen2.5-Coder-0.5B-Instruct behind the same vLLM CPU server (serve_vllm_cpu.sh), driven by
ThinkBooster's own StepCandidateGeneratorThroughAPI + BlackboxModelWithStreaming:
/v1/chat/completions through the openai client, ``stream=True`` and n=1 per step candidate with
the step cut client-side (stop strings = the detector's, here "\\n\\n"), non-streamed n>1 batches
for whole solutions. Request = [system: prmsearch's step-by-step prompt, user: question] and,
after the first step, [..., assistant: the steps so far, each ending in "\\n\\n"]; ThinkBooster
sends no continue_final_message flag, so the server's chat template (continue_chat_template.jinja)
is what keeps the final assistant message open; the render check at start proves with the
server's /tokenize that the ids equal prmsearch's prompt.
Verifier: prm_adapter.PRMCore on ``--prm DIR`` (same input and scores as prmsearch's qwen-prm
scorer) or ``--prm instant`` (zero-cost), duck-typed as a ThinkBooster PRM scorer (its own
StepScorerPRM has no CPU path for this layout: its HF backend calls vLLM's .reward()).

    venv-tb/bin/python thinkbooster_e2e.py --base-url http://127.0.0.1:18441/v1 \
        --problems-json $OUT/problems.json --prm instant --algos beam,bon --out thinkbooster.json

The harness lifts ThinkBooster's per-call time limits (300 s future timeout, 300 s read timeout)
to 1 h: a 2-core CPU needs longer than 5 min for a problem's n=16 batch while other problems run.
"""
import argparse
import logging
import os
import sys
import threading
import time
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.disable(logging.WARNING)  # ThinkBooster logs every candidate at INFO/WARNING

import openai  # noqa: E402
import sbs_common as C  # noqa: E402
from httpx import Timeout  # noqa: E402
from prm_adapter import make_core  # noqa: E402
from thinkbooster.generators import StepCandidateGeneratorThroughAPI  # noqa: E402
from thinkbooster.models import BlackboxModelWithStreaming  # noqa: E402
from thinkbooster.step_boundary_detectors import ThinkingMarkerDetector  # noqa: E402
from thinkbooster.strategies import StrategyBeamSearch, StrategyOfflineBestOfN  # noqa: E402

SEP = C.STEP_SEP
CALL_TIMEOUT_S = 3600
NO_MARKERS = dict(use_sequence=False, use_conclusion=False, use_thinking=False,
                  use_verification=False, use_structure=False, use_reasoning=False,
                  use_sentence_start=False, use_correction=False)


class DelimDetector(ThinkingMarkerDetector):
    """Step = text through the next "\\n\\n" (the delimiter stays on the step). Stateless: the
    stock detector keeps the cut position in shared instance state (raced by the generator's
    concurrent streams) and only cuts after . ! ? or a newline, which "12 + 5 = 17" never ends
    with. Trajectory end: ThinkBooster's own test (a complete \\boxed{...}, or EOS)."""

    def __init__(self, max_step_tokens):
        super().__init__(**NO_MARKERS, custom_markers=[SEP], min_step_tokens=0,
                         max_step_tokens=max_step_tokens)

    _step_boundary_pos = property(lambda self: None, lambda self, v: None)

    @staticmethod
    def _cut(text):
        lead = len(text) - len(text.lstrip())
        i = text.find(SEP, lead)
        return -1 if i < 0 else i + len(SEP)

    def is_step_complete(self, generated_text, token_count=None):
        return self._cut(generated_text) >= 0 or self.is_trajectory_complete(generated_text)

    def extract_step_text(self, generated_text):
        i = self._cut(generated_text)
        return generated_text if i < 0 else generated_text[:i]

    def detect_steps(self, text, **kw):
        return C.split_steps(text)


def split_steps(steps):
    """ThinkBooster step texts -> the "\\n\\n"-free steps prmsearch scores."""
    out = []
    for s in steps:
        out += C.split_steps(getattr(s, "text", s))
    return out


class PathScorer:
    """ThinkBooster's PRM interface (strategies test `prm_model is not None` and call
    score_trajectories_batch) over a prm_adapter core: one padded forward per call, whole paths."""

    def __init__(self, core):
        self.core = core
        self.prm_model = core

    def reset_prm_stats(self):
        pass

    def score_trajectories_batch(self, chats, trajectories, sample_ids=None, trajectory_ids=None, **kw):
        items = [(next(m["content"] for m in chat if m["role"] == "user"), split_steps(traj))
                 for chat, traj in zip(chats, trajectories)]
        with self.core.lock:
            per_step = self.core.step_scores(items)
        # one score per ThinkBooster step (a step is one "\n\n" piece here)
        return [s if len(s) == len(t) else (s + [None] * len(t))[: len(t)]
                for s, t in zip(per_step, trajectories)]


class CountingModel(BlackboxModelWithStreaming):
    """ThinkBooster's API model, unchanged except for a request counter, the 1 h time limits and
    closing the streams each call opened.

    Why the streams are closed here: ThinkBooster ``break``s out of a stream once its detector has
    the step and never closes it. The abandoned ``openai.Stream`` sits in a reference cycle with
    its generator, so only the cyclic garbage collector finalizes it, and that can happen on any
    thread at any allocation, including inside httpcore's connection pool while that thread holds
    the pool's (non-reentrant) lock; the finalizer's ``response.close()`` then waits on that same
    lock forever and every other request waits behind it. That was the hang of 2026-12-05 (thread
    stacks: ``connection_pool.handle_request`` -> GC -> ``Stream.__stream__`` finally ->
    ``PoolByteStream.close`` -> lock). Closing each stream when its call returns also tells the
    server to stop generating it at once rather than whenever the collector runs."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.client = openai.OpenAI(api_key=self._api_key, base_url=self._base_url, max_retries=0,
                                    timeout=Timeout(connect=10.0, read=CALL_TIMEOUT_S, write=10.0,
                                                    pool=10.0))
        self.openai_api = self.client
        self.calls = 0
        self._lk = threading.Lock()
        self._streams = threading.local()
        completions = self.client.chat.completions
        create = completions.create

        def create_and_track(*args, **kwargs):
            response = create(*args, **kwargs)
            if kwargs.get("stream"):
                self._streams.open.append(response)
            return response

        completions.create = create_and_track

    def generate_texts(self, chats, **args):
        args["timeout"] = CALL_TIMEOUT_S
        return super().generate_texts(chats, **args)

    def _generate_texts_impl(self, chats, **args):
        with self._lk:
            self.calls += len(chats)
        self._streams.open = []
        try:
            return super()._generate_texts_impl(chats, **args)
        finally:
            for stream in self._streams.open:
                stream.close()
            self._streams.open = []


def build(name, core, a):
    model = CountingModel(openai_api_key="EMPTY", model_path=a.model_name, base_url=a.base_url,
                          supports_logprobs=False)
    gen = StepCandidateGeneratorThroughAPI(
        model, thinking_mode=False, detector=DelimDetector(a.max_step_tokens),
        max_new_tokens=a.solution_max_tokens, temperature=a.temperature, supports_logprobs=False,
        max_context_budget=a.context_budget, max_concurrent_requests=a.max_concurrency)
    scorer = PathScorer(core)
    if name == "beam":
        strat = StrategyBeamSearch(gen, scorer, beam_size=a.budget // a.width,
                                   candidates_per_beam=a.width, max_steps=a.max_steps,
                                   aggregation=a.aggregation, prompt_buffer=0)
    elif name == "bon":
        strat = StrategyOfflineBestOfN(scorer, num_trajectories=a.budget, max_steps=a.max_steps,
                                       step_generator=gen, score_aggregation=a.aggregation)
    else:
        raise ValueError(f"{name}: ThinkBooster has beam and bon only")
    return model, gen, strat


def chat_of(question, system):
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def render_checks(a, problem, system, core):
    """The messages ThinkBooster's generator builds (its _prepare_request), rendered by the server
    with the default flags it sends (none), against prmsearch's prompt text."""
    model, gen, _ = build("beam", core, a)
    steps = ["First step: 2 + 3 = 5.", "So the answer is 5."]
    out = []
    for k in (0, 2):
        traj = [SimpleNamespace(text=s + SEP, raw_text=None) for s in steps[:k]]
        msgs = gen._prepare_request(chat_of(problem["question"], system), traj)
        ref = problem["prompt"] + "".join(s + SEP for s in steps[:k])
        out.append(C.render_check(a.base_url, a.model_name, ref, msgs, {},
                                  f"ThinkBooster {'continuation' if k else 'first step'}"))
    model.shutdown()
    return out


def run_once(name, problems, core, a, system):
    model, _, strat = build(name, core, a)
    core.reset_stats()
    requests = [chat_of(p["question"], system) for p in problems]
    C.wait_idle(a.base_url)
    C.reset_prefix_cache(a.base_url)
    m0 = C.read_metrics(a.base_url)
    s0 = C.proc_tree_cpu(a.server_pid)
    t0, c0 = time.perf_counter(), time.process_time()
    res = strat.generate_trajectories_batch(requests, list(range(len(requests))))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = C.proc_tree_cpu(a.server_pid)
    d = C.metrics_delta(m0, C.read_metrics(a.base_url))
    texts = [r.get("trajectory", "") or "" for r in res]
    row = dict(lib="thinkbooster", algo=name, prm=a.prm, problems=len(problems), budget=a.budget,
               wall_s=round(wall, 3), problems_per_s=round(len(problems) / wall, 4),
               gen_tokens=d["generation_tokens"], gen_tok_per_s=round(d["generation_tokens"] / wall, 1),
               http_requests=model.calls, prompt_tokens=d["prompt_tokens"],
               client_cpu_s=round(cpu, 2), prm_busy_s=round(core.busy_s, 3), prm_calls=core.calls,
               prm_items=core.items, prm_tokens=core.tokens, prm_padded_tokens=core.padded_tokens,
               tb_token_stats_out=sum((r.get("token_stats") or {}).get("output_tokens", 0) for r in res),
               texts=texts, **C.server_fields(d, s0, s1))
    C.add_raw_baseline(row, a, problems)
    model.shutdown()
    return row


def main():
    ap = argparse.ArgumentParser()
    C.add_common_args(ap, "beam,bon")
    ap.add_argument("--aggregation", default="last", choices=["last", "min", "product", "mean"])
    ap.add_argument("--context-budget", type=int, default=4096)
    ap.add_argument("--max-concurrency", type=int, default=256)
    ap.add_argument("--prm-threads", type=int, default=1)
    a = ap.parse_args()
    stacks_every = float(os.environ.get("TB_STACKS_EVERY", "0") or 0)
    if stacks_every > 0:  # a hang's diagnosis: every thread's stack to stderr every S seconds
        import faulthandler

        faulthandler.dump_traceback_later(stacks_every, repeat=True)
    problems, meta = C.load_problems(a.problems_json, a.problems)
    agg = {"product": "prod", "mean": "last"}.get(a.aggregation, a.aggregation)
    core = make_core(a.prm, agg, a.prm_threads)  # ThinkBooster aggregates itself; core.aggregate unused
    print(f"thinkbooster 0.1.1 prm {a.prm}", flush=True)
    checks = render_checks(a, problems[0], meta["system"], core)
    rows = C.run_algorithms(run_once, problems, core, a, meta["system"])
    if a.out:
        C.write_json(dict(lib="thinkbooster", version="0.1.1", args=vars(a), render_checks=checks,
                          rows=rows), a.out)


if __name__ == "__main__":
    main()
