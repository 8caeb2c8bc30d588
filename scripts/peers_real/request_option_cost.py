"""What one request field costs a vLLM server: the same rectangular /v1/completions call (every
prompt, n samples of exactly L tokens, EOS ignored) with and without the field, alternating,
prefix cache reset before each call.

Fields (``--option``): ``logprobs`` (``"logprobs": 0``; prmsearch asks only when a strategy or
scorer reads them: policy confidence, MCTS priors, confidence voting) and ``seed`` (``"seed": 0``;
prmsearch seeds every request so a search is reproducible). The raw-engine baselines send
neither, so this separates their cost from the rest of a framework / raw gap. Standard library
only; start the server first (``serve_vllm_cpu.sh start``) and write the problems with
``sbs_problems.py``.

    python request_option_cost.py --option seed --base-url http://127.0.0.1:18441/v1 \
        --problems-json /work/runs/s32/problems.json --problems 4 --n 16 \
        --tokens 200 --repeats 2
"""
import argparse
import json
import statistics

import sbs_common as C

OPTIONS = {"logprobs": {"logprobs": 0}, "seed": {"seed": 0}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--option", choices=sorted(OPTIONS), required=True,
                    help="the request field to price")
    ap.add_argument("--base-fields", default="{}",
                    help='JSON fields both calls carry, e.g. \'{"seed": 0}\'')
    ap.add_argument("--base-url", default="http://127.0.0.1:18441/v1")
    ap.add_argument("--model-name", default="policy")
    ap.add_argument("--problems-json", required=True)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--n", type=int, default=16, help="samples a prompt")
    ap.add_argument("--tokens", type=int, default=200, help="tokens a sample (EOS ignored)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--repeats", type=int, default=2, help="calls of each kind, alternating")
    ap.add_argument("--out", help="write the figures to this JSON file")
    a = ap.parse_args()
    for name in ("problems", "n", "tokens", "repeats"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    try:
        base = json.loads(a.base_fields)
    except json.JSONDecodeError as err:
        ap.error(f"--base-fields is not JSON ({err}): give an object such as '{{\"seed\": 0}}'")
    if not isinstance(base, dict):
        ap.error(f"--base-fields must be a JSON object, got {a.base_fields!r}")
    problems, _ = C.load_problems(a.problems_json, a.problems)
    prompts = [p["prompt"] for p in problems]
    if not C.reset_prefix_cache(a.base_url):
        raise SystemExit("the server refused POST /reset_prefix_cache: start it with "
                         "VLLM_SERVER_DEV_MODE=1 (serve_vllm_cpu.sh does)")
    rates = {False: [], True: []}
    for rep in range(a.repeats):
        order = (False, True) if rep % 2 == 0 else (True, False)
        for sent in order:
            extra = {**base, **OPTIONS[a.option]} if sent else dict(base)
            call = C.raw_engine(a.base_url, a.model_name, prompts, a.n,
                                len(prompts) * a.n * a.tokens, a.temperature, extra=extra)
            seconds, toks = call["raw_wall_s"], call["raw_gen_tokens"]
            rates[sent].append(toks / seconds)
            print(json.dumps(dict(repeat=rep, option=a.option, sent=sent,
                                  seconds=round(seconds, 2), tokens=toks,
                                  tok_per_s=round(toks / seconds, 1))), flush=True)
    without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
    field = json.dumps(OPTIONS[a.option])[1:-1]
    result = dict(option=a.option, base_fields=base, problems=len(prompts), n=a.n, tokens=a.tokens,
                  repeats=a.repeats, tok_per_s_without=round(without, 1),
                  tok_per_s_with=round(with_, 1), with_over_without=round(with_ / without, 3))
    print(f"| request | tokens/s (median of {a.repeats}) |\n|---|---|\n| without {a.option} | "
          f"{without:.1f} |\n| with {field} | {with_:.1f} |\n\nwith / without: "
          f"{with_ / without:.3f} ({len(prompts)} prompts x n={a.n} x {a.tokens} tokens a call; "
          f"both calls carry {json.dumps(base)})")
    if a.out:
        C.write_json(result, a.out)


if __name__ == "__main__":
    main()
