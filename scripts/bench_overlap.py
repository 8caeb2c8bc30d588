"""Lock step against overlapped rounds on the embedded models (or any policy and PRM).

    python scripts/bench_overlap.py [--problems 64] [--overlap 2] [--policy ID --prm ID]
    python scripts/bench_overlap.py --server http://127.0.0.1:18431/v1 --served-model arith

With ``--server`` the policy is the ``openai`` backend on a vLLM OpenAI-compatible server that
serves the embedded policy (tokenizer from the package), the PRM stays in-process.

Beam search, particle filtering and best-of-N at N=16 over the first arithmetic test problems,
each run alternately with ``overlap=1`` and ``overlap=K`` (see ``prmsearch.perf.overlap``);
prints one markdown table.
"""

from __future__ import annotations

import argparse

from prmsearch.api import resolve_policy, resolve_scorer
from prmsearch.arith.problems import load_split
from prmsearch.perf.overlap import HEADER, measure_overlap


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--policy", default=None, help="policy id or folder (default: embedded)")
    parser.add_argument("--prm", default=None, help="PRM id or folder (default: embedded)")
    parser.add_argument("--server", default=None, help="base URL of a vLLM server of the embedded policy")
    parser.add_argument("--served-model", default="arith", help="model name on --server")
    args = parser.parse_args()
    if args.server:
        from prmsearch.arith.models import default_policy_path
        from prmsearch.policies.openai import OpenAIPolicy

        policy = OpenAIPolicy(args.server, args.served_model, tokenizer=str(default_policy_path()),
                              server="vllm", context_length=256, timeout=300.0)
    else:
        policy = resolve_policy(args.policy)
    scorer = resolve_scorer(args.prm)
    questions = [p.question for p in load_split("test", args.problems)]

    def clear_caches() -> None:
        for backend in (policy, scorer):
            clear = getattr(backend, "clear_caches", None)
            if callable(clear):
                clear()

    print(HEADER)
    for strategy, options in (("beam", {"n": 16, "width": 4}), ("particle_filter", {"n": 16}),
                              ("best_of_n", {"n": 16})):
        figures = measure_overlap(policy, scorer, questions, strategy, args.overlap, args.repeats,
                                  clear_caches, **options)
        print(figures.row(), flush=True)


if __name__ == "__main__":
    main()
