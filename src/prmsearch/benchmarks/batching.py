"""Where the engine saves compute, measured side by side in one run on the real backends.

* cross-problem batching: the same beam search over many problems, batched by the driver vs.
  one problem at a time (the peers' way), with the same seeds, hence the same answers;
* prefix reuse: policy prompt tokens computed vs. a naive loop that re-prefills the whole path
  for every sample of every request;
* incremental PRM scoring: PRM tokens computed vs. re-scoring every full path at every step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from prmsearch.api import Searcher
from prmsearch.policies.base import Generation, GenerationRequest, Policy, SamplingParams
from prmsearch.scorers.base import Scorer


class CountingPolicy:
    """Wraps a policy and counts what a naive loop would prefill: n x prompt length per request."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.naive_prompt_tokens = 0
        self.requests = 0

    @property
    def num_parameters(self) -> int:
        return self.policy.num_parameters

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out = self.policy.generate(requests)
        for request, gen in zip(requests, out, strict=True):
            prompt = gen.prompt_tokens_computed + gen.prompt_tokens_cached
            self.naive_prompt_tokens += request.n * prompt
            self.requests += 1
        return out


@dataclass(frozen=True)
class EngineFigures:
    """One run's figures."""

    problems: int
    batched_s: float
    sequential_s: float
    same_answers: bool
    accuracy: float
    prompt_computed: int
    prompt_naive: int
    prm_computed: int
    prm_naive: int
    max_depth: int

    def table(self) -> str:
        return "\n".join(
            [
                "| measure | prmsearch | naive | ratio |",
                "|---|---|---|---|",
                f"| wall s, beam over {self.problems} problems (batched vs one at a time) | "
                f"{self.batched_s:.1f} | {self.sequential_s:.1f} | "
                f"{self.sequential_s / self.batched_s:.1f}x |",
                f"| policy prompt tokens computed | {self.prompt_computed:,} | {self.prompt_naive:,} | "
                f"{self.prompt_naive / max(1, self.prompt_computed):.1f}x |",
                f"| PRM tokens computed | {self.prm_computed:,} | {self.prm_naive:,} | "
                f"{self.prm_naive / max(1, self.prm_computed):.1f}x |",
                "",
                f"Same answers batched and one at a time: {self.same_answers}; accuracy "
                f"{100 * self.accuracy:.1f}%; deepest path {self.max_depth} steps.",
            ]
        )


def measure_engine(
    policy: Policy,
    scorer: Scorer,
    questions: Sequence[str],
    golds: Sequence[str],
    *,
    n: int = 16,
    width: int = 4,
    temperature: float = 0.8,
    clear_caches=None,
) -> EngineFigures:
    """Beam search over ``questions`` batched, then one at a time; count tokens on the way."""
    counting = CountingPolicy(policy)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=64)
    searcher = Searcher(counting, scorer, "beam", n=n, width=width, sampling=sampling)
    if clear_caches:
        clear_caches()
    start = time.perf_counter()
    batched = searcher.run(questions)
    batched_s = time.perf_counter() - start
    ledger = searcher.last_ledger
    assert ledger is not None
    naive_prompt = counting.naive_prompt_tokens
    if clear_caches:
        clear_caches()
    start = time.perf_counter()
    sequential = [searcher(q) for q in questions]
    sequential_s = time.perf_counter() - start
    same = [r.answer for r in batched] == [r.answer for r in sequential]
    accuracy = sum(r.answer == g for r, g in zip(batched, golds, strict=True)) / len(questions)
    return EngineFigures(
        problems=len(questions),
        batched_s=batched_s,
        sequential_s=sequential_s,
        same_answers=same,
        accuracy=accuracy,
        prompt_computed=ledger.prompt_tokens_computed,
        prompt_naive=naive_prompt,
        prm_computed=ledger.prm_tokens_computed,
        prm_naive=ledger.prm_tokens_computed + ledger.prm_tokens_cached,
        max_depth=max(len(r.steps) for r in batched),
    )
