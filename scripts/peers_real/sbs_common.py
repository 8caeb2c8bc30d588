"""Shared helpers of the real-model side-by-side (its_hub, ThinkBooster and prmsearch on one vLLM
CPU server with Qwen2.5-Coder-0.5B-Instruct).

Standard library only, so all three venvs import it: the GSM8K problems (read from the JSON that
`sbs_problems.py` writes with prmsearch's own loader, outside the repository), the step split,
the zero-cost verifier (one hash function, so all three libraries get the same pseudo-random
scores for the same path), the server's Prometheus counters, the prefix-cache reset, the CPU
seconds of the server's process tree, the render check (vLLM's /tokenize: does a library's chat
request become the same token ids as prmsearch's text prompt?) and the raw-engine baseline (one
batched /v1/completions request with the same prompts).

Accuracy is not computed here: every script stores its final answer texts, and
`summarize.py` grades all of them with prmsearch's GSM8K grader (one grader for all three).
"""
import argparse
import json
import os
import time
import urllib.request
import zlib

STEP_SEP = "\n\n"
METRICS = ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
           "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
           "vllm:request_success_total", "vllm:iteration_tokens_total_count",
           "vllm:iteration_tokens_total_sum"]
HTTP_HANDLERS = ("/v1/completions", "/v1/chat/completions")


def server_root(base_url):
    return base_url.rstrip("/").removesuffix("/v1")


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def _read(path):
    with open(path) as f:
        return f.read()


def load_problems(path, n):
    """[{id, question, gold, prompt}] from the JSON written by sbs_problems.py; ``prompt`` is the
    exact text prmsearch sends before the first step (chat template + step-by-step system)."""
    data = read_json(path)
    return data["problems"][:n], data


def split_steps(text):
    """Steps of a whole answer as prmsearch cuts them: the non-blank pieces between blank lines."""
    return [p for p in (text or "").split(STEP_SEP) if p.strip()]


def instant_score(question, steps):
    """The zero-cost verifier: a pseudo-random score in [0.05, 0.95] of (question, path so far).
    The same formula as the prmsearch side's ScriptedScorer, so all three see the same scores."""
    return 0.05 + 0.9 * (zlib.crc32((question + "\x00".join(steps)).encode()) % 10007) / 10007


def read_metrics(base_url):
    """vLLM counters (summed over labels) plus HTTP request counts per handler."""
    vals = dict.fromkeys(METRICS, 0.0)
    for h in HTTP_HANDLERS:
        vals["http:" + h] = 0.0
    try:
        text = urllib.request.urlopen(server_root(base_url) + "/metrics", timeout=30).read().decode()
    except Exception:
        return vals
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in vals:
            vals[name] += float(line.rsplit(" ", 1)[1])
        elif name == "http_requests_total":
            for h in HTTP_HANDLERS:
                if f'handler="{h}"' in line:
                    vals["http:" + h] += float(line.rsplit(" ", 1)[1])
    return vals


def metrics_delta(m0, m1):
    out = {}
    for k in m0:
        key = k.removeprefix("vllm:").removesuffix("_total")
        out[key] = round(m1[k] - m0[k])
    out["http_requests"] = sum(out.pop("http:" + h) for h in HTTP_HANDLERS)
    return out


def engine_fields(d, prefix=""):
    """Engine steps (scheduler iterations) and tokens per step, from a metrics delta."""
    steps = d.get("iteration_tokens_total_count", 0)
    toks = d.get("iteration_tokens_total_sum", 0)
    return {prefix + "engine_steps": steps,
            prefix + "tokens_per_engine_step": round(toks / steps, 1) if steps else None}


def wait_idle(base_url, timeout_s=900):
    """Wait until the server runs and queues no request (vllm:num_requests_running/waiting = 0),
    so that a run or a baseline never shares the engine with the tail of the previous one
    (ThinkBooster leaves its step streams generating past the boundary). Seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        try:
            text = urllib.request.urlopen(server_root(base_url) + "/metrics", timeout=30).read().decode()
        except Exception:
            return round(time.perf_counter() - t0, 1)
        busy = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))
        if busy == 0:
            break
        time.sleep(1.0)
    return round(time.perf_counter() - t0, 1)


def reset_prefix_cache(base_url):
    """Empty the server's prefix cache (needs VLLM_SERVER_DEV_MODE=1); True when done."""
    req = urllib.request.Request(server_root(base_url) + "/reset_prefix_cache", data=b"",
                                 method="POST")
    try:
        urllib.request.urlopen(req, timeout=60).read()
        return True
    except Exception:
        return False


def proc_tree_cpu(root_pid):
    """CPU seconds (user+sys) of root_pid and its descendants, summed by process name."""
    if not root_pid:
        return {}
    tck = os.sysconf("SC_CLK_TCK")
    out, todo = {}, [int(root_pid)]
    while todo:
        pid = todo.pop()
        try:
            stat = _read(f"/proc/{pid}/stat")
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            f = stat[stat.rindex(")") + 2:].split()
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / tck
            for tid in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return out


def cpu_delta(c0, c1):
    return {k: round(c1[k] - c0.get(k, 0.0), 2) for k in c1 if c1[k] - c0.get(k, 0.0) > 0.005}


def _post_json(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=timeout))


def tokenize(base_url, model, *, prompt=None, messages=None, **flags):
    """Token ids the server computes for a text prompt (as /v1/completions does) or for chat
    messages rendered with its chat template (as /v1/chat/completions does, flags such as
    continue_final_message / add_generation_prompt passed through)."""
    body = {"model": model}
    if prompt is not None:
        body.update(prompt=prompt, add_special_tokens=False)
    else:
        body.update(messages=messages, **flags)
    return _post_json(server_root(base_url) + "/tokenize", body)["tokens"]


def render_check(base_url, model, reference_text, messages, flags, label):
    """Compare the ids of a library's chat request with the ids of prmsearch's prompt text."""
    ref = tokenize(base_url, model, prompt=reference_text)
    got = tokenize(base_url, model, messages=messages, **flags)
    first = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
    out = dict(label=label, equal=ref == got, reference_tokens=len(ref), request_tokens=len(got),
               first_difference=None if ref == got else first, flags=flags)
    print("render check " + json.dumps(out), flush=True)
    return out


def raw_engine(base_url, model, prompts, budget, tokens_target, temperature, server_pid=None,
               extra=None):
    """ONE /v1/completions request: every prompt, n=budget, exactly L tokens per sample, with L
    chosen so the total matches tokens_target (``extra``: more body fields, such as a seed).
    Prefix cache reset first."""
    L = max(1, round(tokens_target / (len(prompts) * budget)))
    body = dict(model=model, prompt=list(prompts), n=budget, max_tokens=L, min_tokens=L,
                ignore_eos=True, temperature=temperature, add_special_tokens=False, **(extra or {}))
    waited = wait_idle(base_url)
    reset_prefix_cache(base_url)
    m0 = read_metrics(base_url)
    s0 = proc_tree_cpu(server_pid)
    t0 = time.perf_counter()
    resp = _post_json(base_url.rstrip("/") + "/completions", body, timeout=3600)
    wall = time.perf_counter() - t0
    s1 = proc_tree_cpu(server_pid)
    d = metrics_delta(m0, read_metrics(base_url))
    toks = resp["usage"]["completion_tokens"]
    return dict(raw_waited_idle_s=waited, raw_tokens_per_seq=L, raw_seqs=len(prompts) * budget,
                raw_gen_tokens=toks,
                raw_wall_s=round(wall, 3), raw_tok_per_s=round(toks / wall, 1),
                raw_server_cpu_s=cpu_delta(s0, s1), raw_prefix_cache_hits=d["prefix_cache_hits"],
                raw_prefix_cache_queries=d["prefix_cache_queries"], **engine_fields(d, "raw_"))


def server_fields(d, s0, s1):
    """The server-side figures of one run, the same keys for every library: /metrics deltas
    ``d`` and the server's CPU seconds between the process-tree readings ``s0`` and ``s1``."""
    return dict(
        http_requests_server=d["http_requests"], server_gen_tokens=d["generation_tokens"],
        server_prompt_tokens=d["prompt_tokens"], server_requests_success=d["request_success"],
        prefix_cache_hits=d["prefix_cache_hits"], prefix_cache_queries=d["prefix_cache_queries"],
        prefix_hit_rate=round(d["prefix_cache_hits"] / max(1, d["prefix_cache_queries"]), 3),
        server_cpu_s=cpu_delta(s0, s1), **engine_fields(d))


def add_raw_baseline(row, a, problems):
    """Measure the raw engine on the run's prompts and token count right after it (unless
    ``--no-raw``) and set ``ratio`` = the library's tok/s over the raw engine's."""
    if a.no_raw or not row["gen_tokens"]:
        return row
    row.update(raw_engine(a.base_url, a.model_name, [p["prompt"] for p in problems],
                          a.budget, row["gen_tokens"], a.temperature, a.server_pid))
    row["ratio"] = round(row["gen_tok_per_s"] / row["raw_tok_per_s"], 4)
    return row


def add_common_args(ap, algos):
    """The flags every library's script takes (``algos``: its default algorithm list)."""
    ap.add_argument("--base-url", default="http://127.0.0.1:18441/v1")
    ap.add_argument("--model-name", default="policy")
    ap.add_argument("--prm", default="instant", help="qwen-prm-layout PRM folder, or 'instant'")
    ap.add_argument("--problems-json", required=True)
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--width", type=int, default=4, help="children per beam, as prmsearch's width")
    ap.add_argument("--algos", default=algos)
    ap.add_argument("--max-steps", type=int, default=16)
    ap.add_argument("--max-step-tokens", type=int, default=320)
    ap.add_argument("--solution-max-tokens", type=int, default=2048)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="one small unmeasured run per algorithm")
    ap.add_argument("--server-pid", type=int, default=None)
    ap.add_argument("--no-raw", action="store_true")
    ap.add_argument("--out", default=None)


def median_row(reps, key="problems_per_s"):
    """The median run by `key`, with every run's key and ratio listed (accuracy: summarize.py)."""
    reps = sorted(reps, key=lambda r: r[key])
    row = dict(reps[len(reps) // 2])
    for k in (key, "ratio", "gen_tokens"):
        if k in reps[0]:
            row[k + "_all"] = [r.get(k) for r in reps]
    return row


#: the unmeasured warm-up problem of every library's script
WARM_QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have now?"


def run_algorithms(run_once, problems, core, a, system):
    """Warm up each algorithm on one small problem (unless ``--warmup 0``), then run it
    ``--repeats`` times on ``problems``; each run is printed, and the median run by problems/s
    is the algorithm's row, with every run under ``runs``."""
    if a.warmup:
        warm = argparse.Namespace(**{**vars(a), "no_raw": True, "budget": min(4, a.budget),
                                     "width": min(a.width, 4)})
        for name in a.algos.split(","):
            run_once(name, [{"question": WARM_QUESTION, "prompt": ""}], core, warm, system)
    rows = []
    for name in a.algos.split(","):
        reps = [run_once(name, problems, core, a, system) for _ in range(a.repeats)]
        for r in reps:
            print(json.dumps({k: v for k, v in r.items() if k != "texts"}), flush=True)
        row = median_row(reps)
        row["runs"] = reps
        rows.append(row)
    return rows
