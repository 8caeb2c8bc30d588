"""The driver's schedules side by side on the embedded models (or any policy and PRM).

    python -m benchmarks.bench_schedules [--problems 64] [--policy ID --prm ID]
    python -m benchmarks.bench_schedules --server http://127.0.0.1:18431/v1 --served-model arith
    python -m benchmarks.bench_schedules --vllm --problems 32

With ``--server`` the policy is the ``openai`` backend on a vLLM OpenAI-compatible server that
serves the embedded policy (tokenizer from the package); with ``--vllm`` it is the embedded
policy on the offline vLLM engine; the PRM stays in-process.

Beam search, particle filtering and best-of-N at N=16 over the first arithmetic test problems,
each run in turn under lock-step rounds, two overlapped groups and the asynchronous flow (see
``benchmarks.schedules``); prints one markdown table.
"""

from __future__ import annotations

import argparse

from benchmarks.schedules import DEFAULT_SCHEDULES, measure_schedules
from prmsearch.api import resolve_policy, resolve_scorer
from prmsearch.arith.problems import load_split


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--schedules", default=",".join(DEFAULT_SCHEDULES),
                        help=f"comma-separated, from {list(DEFAULT_SCHEDULES)}")
    parser.add_argument("--strategies", default="beam,particle_filter,best_of_n")
    parser.add_argument("--policy", default=None, help="policy id or folder (default: embedded)")
    parser.add_argument("--prm", default=None, help="PRM id or folder (default: embedded)")
    parser.add_argument("--server", default=None, help="base URL of a vLLM server of the embedded policy")
    parser.add_argument("--served-model", default="arith", help="model name on --server")
    parser.add_argument("--vllm", action="store_true",
                        help="the policy on the offline vLLM engine (embedded policy, engine loop)")
    parser.add_argument("--max-concurrency", type=int, default=32, help="HTTP requests in flight")
    args = parser.parse_args()
    unknown = set(args.schedules.split(",")) - set(DEFAULT_SCHEDULES)
    if unknown:
        parser.error(f"unknown schedule(s) {sorted(unknown)}; known: {list(DEFAULT_SCHEDULES)}")
    schedules = {label: DEFAULT_SCHEDULES[label] for label in args.schedules.split(",")}
    if args.server:
        from prmsearch.arith.models import default_policy_path
        from prmsearch.policies.openai import OpenAIPolicy

        policy = OpenAIPolicy(args.server, args.served_model, tokenizer=str(default_policy_path()),
                              server="vllm", context_length=256, timeout=300.0,
                              max_concurrency=args.max_concurrency)
    elif args.vllm:
        from prmsearch.arith.models import default_policy_path
        from prmsearch.policies.vllm import VLLMPolicy

        policy = VLLMPolicy(default_policy_path(), dtype="float32", max_model_len=256)
    else:
        policy = resolve_policy(args.policy)
    scorer = resolve_scorer(args.prm)
    questions = [p.question for p in load_split("test", args.problems)]

    def clear_caches() -> None:
        for backend in (policy, scorer):
            clear = getattr(backend, "clear_caches", None)
            if callable(clear):
                clear()

    options = {"beam": {"n": 16, "width": 4}, "particle_filter": {"n": 16}, "best_of_n": {"n": 16}}
    for number, strategy in enumerate(args.strategies.split(",")):
        figures = measure_schedules(policy, scorer, questions, strategy, schedules, args.repeats,
                                    clear_caches, **options.get(strategy, {"n": 16}))
        if number == 0:
            print(figures.header())
        print(figures.row(), flush=True)


if __name__ == "__main__":
    main()
