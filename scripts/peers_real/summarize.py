"""One markdown table of the real-model side-by-side (run_side_by_side.sh), graded here.

Accuracy is computed in this script, for all three libraries alike, from the final texts each
run stored: prmsearch's GSM8K grading (``prmsearch.benchmarks.grading.grade``: the answer of
the last \\boxed{}, else an "answer is" cue, compared with the gold number of problems.json by
prmsearch's equivalence rules). Run it in the prmsearch venv:

    $PRMSEARCH_VENV/bin/python summarize.py /work/runs/peers-real/results > summary.md
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sbs_common as C

from prmsearch.benchmarks.grading import grade

LIBS = (("its_hub", "itshub"), ("ThinkBooster", "thinkbooster"), ("prmsearch", "prmsearch"))
VERIFIERS = (("prm", "real PRM"), ("instant", "zero-cost"))


def accuracy(run, golds):
    texts = run.get("texts") or []
    ok = sum(bool(grade(t, g)) for t, g in zip(texts, golds))
    return ok, len(texts)


def algo_label(r):
    b, w = r.get("budget", 16), (r.get("args") or {}).get("width", 4)  # children per beam, all three
    return {"beam": f"beam {b} (width {w})", "pf": f"particle filter {b}",
            "bon": f"best-of-{b}"}[r["algo"]]


def prm_tokens(r, zero):
    if zero:
        return "- (zero-cost)"
    s = f"{r['prm_tokens']:,}"
    if r.get("prm_padded_tokens") and r["prm_padded_tokens"] != r["prm_tokens"]:
        s += f" ({r['prm_padded_tokens']:,} padded)"
    if r.get("prm_tokens_cached"):
        s += f" (+{r['prm_tokens_cached']:,} cached)"
    return s


def main():
    d = sys.argv[1]
    problems, _ = C.load_problems(os.path.join(d, "problems.json"), 10**9)
    golds = [p["gold"] for p in problems]
    print("## Real policy side by side: Qwen2.5-Coder-0.5B-Instruct on one vLLM CPU server, "
          "GSM8K test (shuffle seed 0)\n")
    print("| library | verifier | algorithm | problems/s | generated tokens | generated tok/s |"
          " framework / raw | HTTP requests | PRM tokens | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    checks, notes = [], []
    order = {"beam": 0, "pf": 1, "bon": 2}
    rows = []
    for vkey, vname in VERIFIERS:
        for lib, stem in LIBS:
            path = os.path.join(d, f"{stem}_{vkey}.json")
            if not os.path.exists(path):
                continue
            data = C.read_json(path)
            checks += [(lib, c) for c in data.get("render_checks", [])]
            for r in data["rows"]:
                r["args"] = data.get("args", {})
                rows.append((vkey != "prm", order[r["algo"]], lib, vname, r))
    for _zero_first, _, lib, vname, r in sorted(rows, key=lambda x: (x[0], x[1])):
        runs = r.get("runs") or [r]
        accs = [accuracy(x, golds[: x["problems"]]) for x in runs]
        acc = " / ".join(f"{ok}/{n} ({ok / max(1, n):.0%})" for ok, n in accs)
        pps = "; ".join(f"{x['problems_per_s']:.4f}" for x in runs)
        ratio = "; ".join(f"{x['ratio']:.2f}" if x.get("ratio") is not None else "-" for x in runs)
        verifier = vname if vname == "zero-cost" else f"PRM {os.path.basename(str(r['prm']).rstrip('/'))}"
        tokens = "; ".join(f"{x['gen_tokens']:,}" for x in runs)
        tok_s = "; ".join(f"{x['gen_tok_per_s']:.0f}" for x in runs)
        algo = algo_label(r)
        if r.get("extra_body") or r.get("send_seed") is False:  # a probe of prmsearch_e2e.py
            algo += f" ({'no seeds, ' if r.get('send_seed') is False else ''}{r.get('extra_body') or ''})"
        print(f"| {lib} | {verifier} | {algo} | {pps} | {tokens} | {tok_s} | {ratio} | "
              f"{r['http_requests']:,} | {prm_tokens(r, vname == 'zero-cost')} | {acc} |")
        if lib == "ThinkBooster":
            notes.append(f"ThinkBooster {vname} {r['algo']}: the server generated {r['gen_tokens']:,} "
                         f"tokens, ThinkBooster kept ~{r.get('tb_token_stats_out', 0):,} (its own count, "
                         "chars/4 without tiktoken): its step streams run past the boundary")
        failed = r.get("failed_request_texts") or r.get("errors")
        if failed:
            notes.append(f"{lib} {vname} {r['algo']}: {failed} failed requests/searches")
    print(f"\n{len(problems)} problems in problems.json; each row is {len(runs)} run(s), one value per run "
          "(median row's HTTP requests and PRM tokens). Generated tokens are the server's count (its "
          "sampling draws differ between libraries, so problems/s also carries how long the drawn "
          "solutions happened to be; generated tok/s does not). framework / raw = generated tok/s of the "
          "library over tok/s of ONE batched /v1/completions request of the same prompts and total "
          "tokens, measured right after each run.")
    if checks:
        print("\nRender checks (server /tokenize of each library's request vs prmsearch's prompt ids):")
        for _, c in checks:
            verdict = "same ids" if c["equal"] else f"DIFFERENT at token {c['first_difference']}"
            print(f"- {c['label']}: {verdict} ({c['request_tokens']} tokens; flags {c['flags'] or 'none'})")
    if notes:
        print("\nNotes:")
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
