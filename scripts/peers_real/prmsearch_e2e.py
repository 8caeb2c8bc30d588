"""prmsearch end to end on the real 0.5B policy, for the side-by-side with its_hub and ThinkBooster.

Policy: Qwen2.5-Coder-0.5B-Instruct behind the vLLM CPU server (serve_vllm_cpu.sh) through
prmsearch's own ``openai`` backend: /v1/completions, one request per expanded node with n = its
children, prompt = token ids of ``chat header (step-by-step system) + step + "\\n\\n" + ...``
(server="vllm", prompt_as_ids, context_length 4096 so no request overruns --max-model-len).
Verifier, in this process: ``--prm DIR`` = prmsearch's ``qwen-prm`` transformers scorer on that
folder (cpu, float32, incremental: score cache + KV prefix cache), or ``--prm instant`` = the
zero-cost verifier (sbs_common.instant_score through prmsearch's ScriptedScorer).

    $PRMSEARCH_VENV/bin/python prmsearch_e2e.py --base-url http://127.0.0.1:18441/v1 \
        --problems-json $OUT/problems.json --prm instant --algos beam,pf,bon --out prmsearch.json

Per run (scorer caches cleared, server prefix cache reset): problems/s, generated tokens, HTTP
requests (client count and the server's http_requests_total), prompt tokens, prefix-cache
hits/queries, PRM tokens computed/cached (the ledger), driver time split, the final texts (graded
by summarize.py with prmsearch's GSM8K grader, like the peers') and the raw-engine baseline
(sbs_common.raw_engine) for the same total tokens. Repeats use seeds 0, 1, 2 ...
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sbs_common as C
import torch

from prmsearch.api import Searcher
from prmsearch.benchmarks.grading import search_matcher
from prmsearch.policies.base import SamplingParams
from prmsearch.policies.openai import OpenAIPolicy
from prmsearch.scorers.base import make_scorer

STRATEGY = {"beam": "beam", "pf": "particle_filter", "bon": "best_of_n"}
DEFAULT_POLICY = os.path.expanduser("~/.cache/prmsearch/models/qwen2.5-coder-0.5b-instruct")


class CountingOpenAIPolicy(OpenAIPolicy):
    """prmsearch's OpenAI policy, unchanged except that HTTP bodies and batches are counted."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.http_bodies = 0
        self.post_batches = 0

    def _post(self, bodies):
        self.http_bodies += len(bodies)
        self.post_batches += 1
        return super()._post(bodies)


def make_searcher(name, policy, scorer, a, seed, budget=None):
    budget = budget or a.budget
    opts = dict(n=budget, aggregation=a.aggregation)
    if name == "beam":
        opts["width"] = min(a.width, budget)
    if a.selection and name != "bon":
        opts["selection"] = a.selection
    return Searcher(policy, scorer, STRATEGY[name],
                    sampling=SamplingParams(temperature=a.temperature,
                                            max_new_tokens=a.max_step_tokens),
                    max_depth=a.max_steps, solution_max_tokens=a.solution_max_tokens,
                    seed=seed, matcher=search_matcher(), **opts)


def run_once(name, policy, scorer, problems, a, seed):
    if hasattr(scorer, "clear_caches"):
        scorer.clear_caches()
    C.wait_idle(a.base_url)
    C.reset_prefix_cache(a.base_url)
    policy.http_bodies = policy.post_batches = 0
    m0 = C.read_metrics(a.base_url)
    s0 = C.proc_tree_cpu(a.server_pid)
    searcher = make_searcher(name, policy, scorer, a, seed)
    t0, c0 = time.perf_counter(), time.process_time()
    results = searcher.run([p["question"] for p in problems])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = C.proc_tree_cpu(a.server_pid)
    d = C.metrics_delta(m0, C.read_metrics(a.base_url))
    L, st = searcher.last_ledger, searcher.last_stats
    row = dict(
        lib="prmsearch", algo=name, prm=a.prm, max_concurrency=a.max_concurrency,
        seed=seed, problems=len(problems), budget=a.budget, wall_s=round(wall, 3),
        problems_per_s=round(len(problems) / wall, 4),
        gen_tokens=L.generated_tokens, gen_tok_per_s=round(L.generated_tokens / wall, 1),
        prompt_tokens=L.prompt_tokens_computed + L.prompt_tokens_cached,
        prompt_tokens_cached_client=L.prompt_tokens_cached,
        policy_calls=L.policy_calls, generations=L.generations,
        prm_calls=L.prm_calls, prm_tokens=L.prm_tokens_computed,
        prm_tokens_cached=L.prm_tokens_cached,
        rounds=st.rounds, nodes=st.nodes, policy_s=round(st.policy_s, 3),
        prm_busy_s=round(st.scorer_s, 3), driver_s=round(st.driver_s, 3),
        client_cpu_s=round(cpu, 2), errors=sum(r.error is not None for r in results),
        http_requests=policy.http_bodies, post_batches=policy.post_batches,
        **C.server_fields(d, s0, s1),
        texts=[r.text if r.error is None else "" for r in results],
        own_answers=[r.answer for r in results])
    C.add_raw_baseline(row, a, problems)
    return row


def main():
    ap = argparse.ArgumentParser()
    C.add_common_args(ap, "beam,pf,bon")
    ap.add_argument("--policy-dir", default=DEFAULT_POLICY, help="tokenizer + chat template")
    ap.add_argument("--max-concurrency", type=int, default=32,
                    help="HTTP requests in flight (prmsearch's default 32)")
    ap.add_argument("--aggregation", default="last", choices=["last", "min", "prod"])
    ap.add_argument("--selection", default=None,
                    help="final pick of beam/PF (prmsearch's default: weighted vote; 'argmax' "
                         "as its_hub and ThinkBooster pick)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in this process")
    ap.add_argument("--extra-body", default="{}",
                    help='JSON merged into every request, e.g. \'{"logprobs": 0}\' (a probe: what '
                         "token log-probabilities cost the server; prmsearch asks for them only "
                         "when a strategy or scorer reads them, none of these rows)")
    ap.add_argument("--no-seed", action="store_true", help="send no per-request seed (its_hub sends none)")
    a = ap.parse_args()
    extra_body = json.loads(a.extra_body)
    torch.set_num_threads(a.threads)
    problems, _ = C.load_problems(a.problems_json, a.problems)
    policy = CountingOpenAIPolicy(a.base_url, a.model_name, tokenizer=a.policy_dir, server="vllm",
                                  context_length=4096, prompt_as_ids=True, timeout=1800.0,
                                  max_concurrency=a.max_concurrency,
                                  extra_body=extra_body, send_seed=not a.no_seed)
    header = policy.prompt_text(problems[0]["question"], [])
    assert header == problems[0]["prompt"], "problems.json was written for another prompt format"
    if a.prm == "instant":
        from prmsearch.scorers.scripted import ScriptedScorer
        scorer = ScriptedScorer(C.instant_score)
    else:
        scorer = make_scorer("qwen-prm", model=a.prm, device="cpu", dtype="float32")
    print(f"prmsearch policy format {policy.prompt_format.name} prm {a.prm} torch "
          f"{torch.__version__} threads {torch.get_num_threads()}", flush=True)
    if a.warmup:
        for name in a.algos.split(","):  # warm-up, not measured
            make_searcher(name, policy, scorer, a, 99, budget=min(4, a.budget)).run([C.WARM_QUESTION])
    rows = []
    for name in a.algos.split(","):
        reps = [run_once(name, policy, scorer, problems, a, seed) for seed in range(a.repeats)]
        for r in reps:
            r.update(extra_body=extra_body, send_seed=not a.no_seed)
            print(json.dumps({k: v for k, v in r.items() if k not in ("texts", "own_answers")}),
                  flush=True)
        row = C.median_row(reps)
        row["runs"] = reps
        rows.append(row)
    if a.out:
        C.write_json(dict(lib="prmsearch", args=vars(a), rows=rows), a.out)


if __name__ == "__main__":
    main()
