"""Where a search with a real policy and a real verifier spends its time, phase by phase.

    python scripts/solve_phases.py                       # the 0.5B policy and the 1.5B verifier, both on vLLM
    python scripts/solve_phases.py --problems 4 --schedule rounds
    python scripts/solve_phases.py --sequential          # load one engine after the other

Prints the seconds of each phase (imports, loading both backends, the search, closing) and the
search's policy and scorer time, so the time of ``prmsearch solve`` can be taken apart: on a
2-core CPU the engine starts and the verifier's prefill are most of it. The questions are word
problems written for this script (not benchmark items). ``--policy embedded --prm embedded`` runs
the embedded arithmetic models on transformers (seconds; the smoke test uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import time

MODELS = os.path.expanduser("~/.cache/prmsearch/models")
QUESTIONS = (
    "Mara buys 3 boxes of pencils with 12 pencils in each box. She gives 9 pencils to her brother. "
    "How many pencils does she have left?",
    "A baker makes 45 rolls in the morning and twice as many in the afternoon. He sells 100 rolls. "
    "How many rolls are left?",
    "Tom reads 14 pages a day for 5 days and then 20 pages a day for 3 days. How many pages does he read?",
    "A garden has 6 rows of 8 tulips. A storm breaks a quarter of them. How many tulips are still whole?",
)


class Clock:
    """Seconds since the last lap, printed with a label."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, label: str) -> None:
        now = time.perf_counter()
        self.phases[label] = round(now - self.last, 2)
        print(f"{label:>16}: {now - self.last:7.1f} s", flush=True)
        self.last = now


def model_or_embedded(name: str) -> str | None:
    return None if name == "embedded" else os.path.expanduser(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=f"{MODELS}/qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--policy-backend", default="vllm")
    parser.add_argument("--prm", default=f"{MODELS}/qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--prm-family", default="verifier")
    parser.add_argument("--prm-backend", default="vllm")
    parser.add_argument("--max-model-len", type=int, default=4096, help="context of each vLLM engine")
    parser.add_argument("--strategy", default="beam")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--problems", type=int, default=1, choices=range(1, len(QUESTIONS) + 1))
    parser.add_argument("--schedule", default="auto", choices=("auto", "rounds", "async"))
    parser.add_argument("--sequential", action="store_true", help="load the policy, then the PRM")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    clock = Clock()
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from prmsearch.api import Searcher, resolve_policy, resolve_scorer
    from prmsearch.engines.backend_pair import close_together, load_together, start_together

    clock.lap("imports")  # prmsearch's; torch, transformers and vLLM load with the backends
    policy_name, prm_name = model_or_embedded(args.policy), model_or_embedded(args.prm)
    policy_backend = args.policy_backend if policy_name else None
    prm_backend = args.prm_backend if prm_name else None
    policy_args = {"max_model_len": args.max_model_len} if policy_backend == "vllm" else {}
    prm_args = {"max_model_len": args.max_model_len} if prm_backend == "vllm" else {}
    together = start_together(policy_backend, prm_backend) and not args.sequential
    policy, scorer = load_together(
        lambda: resolve_policy(policy_name, policy_backend, **policy_args),
        lambda: resolve_scorer(prm_name, args.prm_family if prm_name else None, prm_backend, **prm_args),
        concurrent=together,
    )
    clock.lap("load together" if together else "load one by one")
    searcher = Searcher(policy, scorer, args.strategy, n=args.n, schedule=args.schedule)
    results = searcher.run(list(QUESTIONS[: args.problems]))
    clock.lap("search")
    stats, ledger = searcher.last_stats, searcher.last_ledger
    print(f"answers {[r.answer for r in results]}, {stats.rounds} rounds, "
          f"policy busy {stats.policy_s:.1f} s, scorer busy {stats.scorer_s:.1f} s, "
          f"{ledger.generated_tokens} tokens generated, "
          f"{ledger.prm_tokens_computed} PRM tokens computed", flush=True)
    close_together(policy, scorer)
    clock.lap("close")
    total = time.perf_counter() - clock.start
    print(f"{'total':>16}: {total:7.1f} s")
    if args.json:
        figures = {**clock.phases, "total": round(total, 2), "policy_busy_s": round(stats.policy_s, 2),
                   "scorer_busy_s": round(stats.scorer_s, 2), "rounds": stats.rounds,
                   "answers": [r.answer for r in results], "generated_tokens": ledger.generated_tokens}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":  # vLLM's engine processes re-import this file: nothing runs on import
    main()
