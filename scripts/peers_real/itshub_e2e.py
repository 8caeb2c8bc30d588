"""its_hub 1.2.0 end to end on the real 0.5B policy, for the side-by-side.

Policy: Qwen2.5-Coder-0.5B-Instruct behind the vLLM CPU server (serve_vllm_cpu.sh), driven by
its_hub's own OpenAICompatibleLanguageModel: /v1/chat/completions, n=1 per node, stop "\\n\\n",
``system_prompt`` = prmsearch's step-by-step system prompt, messages = [system, user: question]
for the first step and [system, user, assistant: "\\n\\n".join(steps) + "\\n\\n"] after it, with
its own ``continue_final_message: true, add_generation_prompt: false``. The server's chat
template (continue_chat_template.jinja) renders that to exactly prmsearch's prompt text; the
render check at start proves it with the server's /tokenize (same token ids).
Verifier: prm_adapter.PRMCore on ``--prm DIR`` (same input text and scores as prmsearch's
qwen-prm scorer; ``prm_adapter.py --check``) or ``--prm instant`` (zero-cost), wrapped in its_hub's
AbstractProcessRewardModel: one padded forward per ascore call over the whole paths, 1 torch
thread, run in asyncio.to_thread like its_hub's own vLLM PRM.

    venv-itshub/bin/python itshub_e2e.py --base-url http://127.0.0.1:18441/v1 \
        --problems-json $OUT/problems.json --prm instant --algos beam,pf,bon --out itshub.json

Two harness settings differ from its_hub's defaults, both so that a slow CPU run finishes: the
aiohttp session has a 1 h timeout (aiohttp's default is 5 min, shorter than a best-of-16 request
waits on 2 cores), and a failed request (e.g. a path longer than the 4096-token context) becomes
the text ERROR_TEXT (its_hub's replace_error_with_message; it holds the stop token, so the path
ends) and is counted, instead of aborting the whole run.
Mode: gather (asyncio.gather over all problems). Per run (server prefix cache reset first):
problems/s, generated tokens (usage, client side), HTTP requests, prompt tokens, prefix cache
(server /metrics), PRM calls/tokens (unpadded and padded), the final texts (graded by
summarize.py with prmsearch's grader) and the raw-engine baseline for the same total tokens.
"""
import argparse
import asyncio
import os
import sys
import time
import warnings

warnings.simplefilter("ignore", DeprecationWarning)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aiohttp  # noqa: E402
import its_hub  # noqa: E402
import sbs_common as C  # noqa: E402
import torch  # noqa: E402
from its_hub.api import AbstractOutcomeRewardModel, AbstractProcessRewardModel, GenerationUsage  # noqa: E402
from its_hub.api.types import ChatMessage  # noqa: E402
from its_hub.core.algorithms.beam_search import BeamSearch  # noqa: E402
from its_hub.core.algorithms.bon import BestOfN  # noqa: E402
from its_hub.core.algorithms.particle_gibbs import ParticleFiltering  # noqa: E402
from its_hub.core.lms.openai_lm import OpenAICompatibleLanguageModel  # noqa: E402
from its_hub.core.lms.step_generation import StepGeneration  # noqa: E402
from prm_adapter import make_core  # noqa: E402

# aiohttp's default session timeout (5 min total) is shorter than a best-of-16 request waits on
# 2 cores; its_hub opens sessions without a timeout argument, so they take this default.
aiohttp.client.DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=3600, sock_connect=30)
STEP_SEP = C.STEP_SEP
ERROR_TEXT = "[request failed] \\boxed{}"


class CountingOpenAILM(OpenAICompatibleLanguageModel):
    """its_hub's OpenAI-compatible LM, unchanged except that every call passes a usage
    accumulator (its own hook), so generated tokens are counted client-side."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.usage = GenerationUsage()

    async def _counted(self, call, args, kw, usage_accumulator):
        """Run its_hub's ``call`` with a fresh accumulator, merged into ours and the caller's."""
        u = GenerationUsage()
        out = await call(*args, usage_accumulator=u, **kw)
        self.usage.merge(u)
        if usage_accumulator is not None:
            usage_accumulator.merge(u)
        return out

    async def agenerate(self, *args, usage_accumulator=None, **kw):
        return await self._counted(super().agenerate, args, kw, usage_accumulator)

    async def agenerate_single(self, *args, usage_accumulator=None, **kw):
        return await self._counted(super().agenerate_single, args, kw, usage_accumulator)


def get(m, k):
    """A field of a chat message (its_hub passes dicts or ChatMessage objects)."""
    return m[k] if isinstance(m, dict) else getattr(m, k)


def question_of(prompt_or_messages):
    if isinstance(prompt_or_messages, str):
        return prompt_or_messages
    return "".join(get(m, "content") or "" for m in prompt_or_messages if get(m, "role") == "user")


class PathPRM(AbstractProcessRewardModel):
    """its_hub PRM interface over a prm_adapter core: one aggregated score per whole answer."""

    def __init__(self, core):
        self.core = core

    def score(self, prompt_or_messages, steps):
        single = isinstance(steps, str)
        resp = [steps] if single else list(steps)
        q = question_of(prompt_or_messages)
        with self.core.lock:
            per_step = self.core.step_scores([(q, C.split_steps(r)) for r in resp])
        out = [self.core.aggregate(s) for s in per_step]
        return out[0] if single else out

    async def ascore(self, prompt_or_messages, steps):
        return await asyncio.to_thread(self.score, prompt_or_messages, steps)


class PathORM(AbstractOutcomeRewardModel):
    """For BestOfN: the same verifier over the steps of each finished answer; one forward per
    ascore call (BestOfN calls it once per problem with its deduplicated answers)."""

    def __init__(self, core):
        self.core = core

    def score(self, messages, **kw):
        batch = bool(messages) and isinstance(messages[0], list)
        convs = messages if batch else [messages]
        items = [(question_of(conv[:-1]), C.split_steps(get(conv[-1], "content"))) for conv in convs]
        with self.core.lock:
            per_step = self.core.step_scores(items)
        out = [self.core.aggregate(s) for s in per_step]
        return out if batch else out[0]

    async def ascore(self, messages, orchestrator=None, **kw):
        return await asyncio.to_thread(self.score, messages)


def step_generation(a):
    # its_hub checks "steps so far >= max_steps" BEFORE appending, so max_steps - 1 gives at most
    # max_steps steps, as prmsearch's max_depth does.
    return StepGeneration(step_token=STEP_SEP, max_steps=a.max_steps - 1, stop_token="\\boxed",
                          temperature=a.temperature)


def build_alg(name, core, a):
    if name == "beam":
        # its_hub's beam_width is the number of beams KEPT (each re-expanded budget / beam_width
        # times); prmsearch's and ThinkBooster's width is children per beam: beams = budget / width.
        return BeamSearch(step_generation(a), PathPRM(core), beam_width=a.budget // a.width)
    if name == "pf":
        return ParticleFiltering(step_generation(a), PathPRM(core))
    if name == "bon":
        return BestOfN(PathORM(core))
    raise ValueError(name)


def make_lm(name, a, system):
    max_tokens = a.solution_max_tokens if name == "bon" else a.max_step_tokens
    return CountingOpenAILM(endpoint=a.base_url, api_key="EMPTY", model_name=a.model_name,
                            system_prompt=system, max_completion_tokens=max_tokens,
                            temperature=a.temperature, replace_error_with_message=ERROR_TEXT)


def render_checks(a, problem, system):
    """The requests its_hub builds (its StepGeneration messages + its LM's request body), rendered
    by the server, against prmsearch's prompt text: first step, and a continuation."""
    lm = make_lm("beam", a, system)
    sg = step_generation(a)
    steps = ["First step: 2 + 3 = 5.", "So the answer is 5."]
    out = []
    for k in (0, 2):
        msgs = [ChatMessage(role="user", content=problem["question"])]
        if k:
            msgs.append(ChatMessage(role="assistant", content=sg._post_process(steps[:k])))
        body = lm._prepare_request_data(msgs, stop=STEP_SEP)
        flags = {f: body[f] for f in ("continue_final_message", "add_generation_prompt") if f in body}
        ref = problem["prompt"] + "".join(s + STEP_SEP for s in steps[:k])
        out.append(C.render_check(a.base_url, a.model_name, ref, body["messages"], flags,
                                  f"its_hub {'continuation' if k else 'first step'}"))
    return out


def run_once(name, problems, core, a, system):
    lm = make_lm(name, a, system)
    alg = build_alg(name, core, a)
    core.reset_stats()

    async def go():
        try:
            return await asyncio.gather(*(alg.ainfer(lm, p["question"], a.budget,
                                                     return_response_only=True)
                                          for p in problems))
        finally:
            await lm.close()

    C.wait_idle(a.base_url)
    C.reset_prefix_cache(a.base_url)
    m0 = C.read_metrics(a.base_url)
    s0 = C.proc_tree_cpu(a.server_pid)
    t0, c0 = time.perf_counter(), time.process_time()
    answers = asyncio.run(go())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = C.proc_tree_cpu(a.server_pid)
    d = C.metrics_delta(m0, C.read_metrics(a.base_url))
    texts = [(r["content"] if isinstance(r, dict) else r.content) or "" for r in answers]
    row = dict(
        lib="its_hub", algo=name, mode="gather", prm=a.prm, problems=len(problems),
        budget=a.budget, wall_s=round(wall, 3), problems_per_s=round(len(problems) / wall, 4),
        gen_tokens=lm.usage.completion_tokens,
        gen_tok_per_s=round(lm.usage.completion_tokens / wall, 1),
        http_requests=lm.usage.num_calls, prompt_tokens=lm.usage.prompt_tokens,
        client_cpu_s=round(cpu, 2), prm_busy_s=round(core.busy_s, 3), prm_calls=core.calls,
        prm_items=core.items, prm_tokens=core.tokens, prm_padded_tokens=core.padded_tokens,
        failed_request_texts=sum(t.count(ERROR_TEXT) for t in texts),
        texts=texts, **C.server_fields(d, s0, s1))
    C.add_raw_baseline(row, a, problems)
    return row


def main():
    ap = argparse.ArgumentParser()
    C.add_common_args(ap, "beam,pf,bon")
    ap.add_argument("--aggregation", default="last", choices=["last", "min", "prod"])
    ap.add_argument("--prm-threads", type=int, default=1)
    a = ap.parse_args()
    problems, meta = C.load_problems(a.problems_json, a.problems)
    core = make_core(a.prm, a.aggregation, a.prm_threads)
    print(f"its_hub {its_hub.__version__} torch {torch.__version__} threads "
          f"{torch.get_num_threads()} prm {a.prm}", flush=True)
    checks = render_checks(a, problems[0], meta["system"])
    rows = C.run_algorithms(run_once, problems, core, a, meta["system"])
    if a.out:
        C.write_json(dict(lib="its_hub", version=its_hub.__version__, args=vars(a),
                          render_checks=checks, rows=rows), a.out)


if __name__ == "__main__":
    main()
