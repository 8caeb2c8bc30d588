"""Where the engine saves compute, measured side by side in one run on the real backends.

* cross-problem batching: the same beam search over many problems, batched by the driver vs.
  one problem at a time (the peers' way), with the same seeds, hence the same answers;
* prefix reuse: policy prompt tokens computed vs. a naive loop that re-prefills the whole path
  for every sample of every request;
* incremental PRM scoring: PRM tokens computed vs. re-scoring every full path at every step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

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

    @property
    def speedup(self) -> float:
        """One-at-a-time wall time over batched wall time."""
        return self.sequential_s / self.batched_s

    @property
    def prompt_ratio(self) -> float:
        """Naive prompt tokens over prompt tokens computed (prefix reuse)."""
        return self.prompt_naive / max(1, self.prompt_computed)

    @property
    def prm_ratio(self) -> float:
        """Full re-score PRM tokens over PRM tokens computed (incremental scoring)."""
        return self.prm_naive / max(1, self.prm_computed)

    def to_dict(self) -> dict[str, Any]:
        """All figures as plain data, ratios included."""
        return {**asdict(self), "speedup": self.speedup, "prompt_ratio": self.prompt_ratio,
                "prm_ratio": self.prm_ratio}

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
    clear_caches: Callable[[], None] | None = None,
    warmup: bool = False,
) -> EngineFigures:
    """Beam search over ``questions`` batched, then one at a time; count tokens on the way.

    ``clear_caches`` runs before each timed run, so both start cold. ``warmup`` first searches
    one question untimed (first-call costs out of the batched run's time; needs
    ``clear_caches``, else the warm-up's cached prefixes would favour the batched run).
    """
    if warmup and clear_caches is None:
        raise ValueError("warmup needs clear_caches (the warm-up must not leave cached prefixes)")
    counting = CountingPolicy(policy)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=64)
    searcher = Searcher(counting, scorer, "beam", n=n, width=width, sampling=sampling)
    if warmup:
        Searcher(policy, scorer, "beam", n=n, width=width, sampling=sampling)(questions[0])
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


@dataclass(frozen=True)
class ArithEngineConfig:
    """The engine measurement on the embedded arithmetic models.

    Attributes:
        problems: the first ``problems`` questions of the arithmetic test split (at most 200).
        n: beam search budget per step.
        width: children per beam (``n`` must be a multiple).
        scorer: ``arith`` (the shipped PRM) or ``policy-confidence`` (no PRM).
        warmup: search one question untimed first.
    """

    problems: int = 64
    n: int = 16
    width: int = 4
    scorer: str = "arith"
    warmup: bool = True

    def __post_init__(self) -> None:
        for name in ("problems", "n", "width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.problems > 200:
            raise ValueError(f"problems must be at most 200 (the test split), got {self.problems}")
        if self.n % self.width:
            raise ValueError(f"n must be a multiple of width ({self.width}), got n={self.n}")
        if self.scorer not in ("arith", "policy-confidence"):
            raise ValueError(f"scorer must be 'arith' or 'policy-confidence', got {self.scorer!r}")


def run_arith_engine(cfg: ArithEngineConfig) -> EngineFigures:
    """Load the embedded policy and scorer, then :func:`measure_engine` over the test split."""
    from prmsearch.arith.models import default_policy_path
    from prmsearch.arith.problems import load_split
    from prmsearch.policies.base import make_policy
    from prmsearch.scorers.base import make_scorer

    policy = make_policy("arith")
    if cfg.scorer == "policy-confidence":
        scorer = make_scorer("policy-confidence", model=str(default_policy_path()), device="cpu",
                             aggregation="min")
    else:
        scorer = make_scorer(cfg.scorer)

    def clear_caches() -> None:
        for backend in (policy, scorer):
            clear = getattr(backend, "clear_caches", None)
            if clear is not None:
                clear()

    problems = load_split("test", cfg.problems)
    return measure_engine(
        policy,
        scorer,
        [p.question for p in problems],
        [str(p.answer) for p in problems],
        n=cfg.n,
        width=cfg.width,
        clear_caches=clear_caches,
        warmup=cfg.warmup,
    )
