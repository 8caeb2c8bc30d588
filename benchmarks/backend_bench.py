"""The transformers backends measured side by side, in one run, on models built in place.

What one run measures:

1. PRM scoring throughput: the same step sequences scored in one batched call vs. one call
   per sequence, with every cache off (tokens/s of real, unpadded tokens).
2. Incremental PRM scoring: a batched beam search runs twice over the same problems and seeds,
   (A) with the backends' reuse on (PRM score + KV prefix caches, policy prefix KV cache) and
   (B) with all reuse off (PRM re-scores every full path, policy re-prefills every prompt).
   A's PRM tokens computed vs. B's; B must equal A's ``computed + cached``, and both runs must
   give the same step scores.
3. Policy prefix reuse over the same two runs: prompt tokens computed by A vs. B, and vs. the
   naive count of a loop that prefills the full prompt for every one of the ``n`` samples.
   The two runs must give the same samples (sampling is counter-based, so they do unless
   float rounding flips a near-tie); the output says whether they did.

Models: random-weight Qwen2 policy and PRM built in place (:mod:`benchmarks.synthetic_models`).
Paths never produce an answer, so every search runs to
``max_depth`` (the driver cuts paths there): the tree depth is real, the text is noise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks.batching import CountingPolicy
from benchmarks.synthetic_models import (
    DELIMITER,
    Log,
    ModelShape,
    TextMaker,
    bench_tokenizer,
    build_policy_model,
    build_prm_model,
    quiet_log,
    shape_step_lengths,
)
from prmsearch.policies.base import Policy, SamplingParams
from prmsearch.scorers.base import ScoreRequest

__all__ = ["BackendBenchConfig", "BackendFigures", "run_backend_bench"]

# ------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class BackendBenchConfig:
    """One run of the backend benchmark.

    Attributes:
        policy: policy model shape.
        prm: PRM model shape.
        problems: questions searched together (one batched search).
        n: beam search budget per step; ``n / width`` beams are kept.
        width: children per beam.
        max_depth: steps per path (the driver cuts paths there); the search depth.
        max_new_tokens: token limit per step.
        mean_step_tokens: target mean step length of the shaped random policy.
        question_words: words per question (a word is ~5 byte tokens).
        score_requests: step sequences in the throughput measurement.
        score_max_steps: steps per throughput sequence are drawn from 1..this.
        step_words: (min, max) words per throughput step.
        max_batch_tokens: padded-token budget per forward, policy and PRM.
        seed: seeds the weights, the texts and the search.
    """

    policy: ModelShape
    prm: ModelShape
    problems: int = 4
    n: int = 16
    width: int = 4
    max_depth: int = 10
    max_new_tokens: int = 256
    mean_step_tokens: float = 40.0
    question_words: int = 40
    score_requests: int = 256
    score_max_steps: int = 8
    step_words: tuple[int, int] = (8, 20)
    max_batch_tokens: int = 16384
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("problems", "n", "width", "max_depth", "max_new_tokens", "question_words",
                     "score_requests", "score_max_steps", "max_batch_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.n % self.width:
            raise ValueError(f"n must be a multiple of width ({self.width}), got n={self.n}")
        if not 1 < self.mean_step_tokens < self.max_new_tokens:
            raise ValueError(
                f"mean_step_tokens must be in (1, max_new_tokens={self.max_new_tokens}), got "
                f"{self.mean_step_tokens}"
            )
        low, high = self.step_words
        if not 1 <= low <= high:
            raise ValueError(f"step_words must be (min, max) with 1 <= min <= max, got {self.step_words}")

    @classmethod
    def full(cls) -> BackendBenchConfig:
        """The default run (about two minutes on one CPU thread)."""
        return cls(
            policy=ModelShape(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=384, vocab=320),
            prm=ModelShape(hidden=192, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=320),
        )

    @classmethod
    def quick(cls) -> BackendBenchConfig:
        """A small run for tests (well under a minute on one CPU thread), still depth 8."""
        return cls(
            policy=ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=320),
            prm=ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=320),
            problems=2,
            n=8,
            width=2,
            max_depth=8,
            max_new_tokens=96,
            mean_step_tokens=20.0,
            question_words=20,
            score_requests=64,
            score_max_steps=4,
            step_words=(4, 12),
        )


# ------------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class ScoringFigures:
    """PRM throughput, batched vs. one request per call, every cache off."""

    requests: int
    tokens: int
    batched_s: float
    single_s: float
    max_abs_diff: float

    @property
    def batched_tps(self) -> float:
        """Tokens/s of the batched call."""
        return self.tokens / self.batched_s

    @property
    def single_tps(self) -> float:
        """Tokens/s of one call per request."""
        return self.tokens / self.single_s


@dataclass(frozen=True)
class SearchFigures:
    """What one batched beam search cost (ledger totals plus driver timings)."""

    prompt_computed: int
    prompt_cached: int
    prompt_naive: int
    generations: int
    generated_tokens: int
    prm_computed: int
    prm_cached: int
    wall_s: float
    policy_s: float
    scorer_s: float
    depth: int
    nodes: int


@dataclass(frozen=True)
class BackendFigures:
    """The figures of one run and the checks that make them comparable."""

    config: BackendBenchConfig
    policy_parameters: int
    prm_parameters: int
    scoring: ScoringFigures
    reuse: SearchFigures
    baseline: SearchFigures
    same_samples: bool
    nodes_compared: int
    score_max_abs_diff: float

    def table(self) -> str:
        """The one side-by-side table, then what was measured and the checks."""
        s, a, b, cfg = self.scoring, self.reuse, self.baseline, self.config
        rows = [
            (f"PRM scoring tokens/s, {s.requests} step sequences ({s.tokens:,} tokens)",
             "batched", f"{s.batched_tps:,.0f}", "one by one", f"{s.single_tps:,.0f}",
             s.batched_tps / s.single_tps),
            (f"PRM tokens computed, beam search depth {a.depth}",
             "incremental", f"{a.prm_computed:,}", "full re-score", f"{b.prm_computed:,}",
             b.prm_computed / max(1, a.prm_computed)),
            ("policy prompt tokens computed, same search",
             "prefix reuse", f"{a.prompt_computed:,}", "no reuse", f"{b.prompt_computed:,}",
             b.prompt_computed / max(1, a.prompt_computed)),
            ("policy prompt tokens computed, same search",
             "prefix reuse", f"{a.prompt_computed:,}", "naive n x prompt", f"{a.prompt_naive:,}",
             a.prompt_naive / max(1, a.prompt_computed)),
            ("search wall s (policy s + PRM s)",
             "all reuse", f"{a.wall_s:.1f} ({a.policy_s:.1f}+{a.scorer_s:.1f})",
             "no reuse", f"{b.wall_s:.1f} ({b.policy_s:.1f}+{b.scorer_s:.1f})",
             b.wall_s / a.wall_s),
        ]
        lines = ["| measure | A | A value | B | B value | A's gain |", "|---|---|---|---|---|---|"]
        lines += [f"| {m} | {an} | {av} | {bn} | {bv} | {r:.2f}x |" for m, an, av, bn, bv, r in rows]
        full_match = b.prm_computed == a.prm_computed + a.prm_cached
        lines += [
            "",
            f"Models: random-weight Qwen2 policy ({self.policy_parameters:,} parameters) and "
            f"Qwen2-PRM ({self.prm_parameters:,}), float32 on CPU, byte-level tokenizer; search: "
            f"beam n={cfg.n} width={cfg.width} over {cfg.problems} problems batched, max_depth="
            f"{cfg.max_depth}, {a.nodes} nodes, {a.generations} steps of mean "
            f"{a.generated_tokens / max(1, a.generations):.1f} tokens (policy output biased to "
            f"~{cfg.mean_step_tokens:g}-token steps).",
            "Throughput: the same requests scored with every PRM cache off, one call vs. one call "
            "per request; tokens are real (unpadded) tokens.",
            "Search: run A (PRM score + KV caches, policy prefix KV cache) and run B (every cache "
            "off) with the same seeds; token counts are the ledger's.",
            f"Check: B's full re-score = A's computed + cached ({a.prm_computed + a.prm_cached:,}): "
            f"{full_match}; same samples in A and B: {self.same_samples} ({self.nodes_compared} "
            f"nodes); max |score A - score B| = {self.score_max_abs_diff:.1e}; batched vs one by "
            f"one max |diff| = {s.max_abs_diff:.1e}.",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """All figures as plain data."""
        return asdict(self)


def make_score_requests(cfg: BackendBenchConfig, rng: np.random.Generator) -> list[ScoreRequest]:
    """``cfg.score_requests`` step sequences over 16 questions, 1..``score_max_steps`` steps each."""
    texts = TextMaker(rng)
    questions = [texts.question(cfg.question_words) for _ in range(16)]
    out = []
    for k in range(cfg.score_requests):
        count = int(rng.integers(1, cfg.score_max_steps + 1))
        steps = tuple(texts.step(*cfg.step_words) for _ in range(count))
        out.append(ScoreRequest(questions[k % len(questions)], steps))
    return out


def measure_scoring(scorer: Any, requests: Sequence[ScoreRequest]) -> ScoringFigures:
    """Score ``requests`` in one call, then one call each (``scorer`` must cache nothing)."""
    scorer.score(list(requests[:2]))  # warm-up
    start = time.perf_counter()
    batched = scorer.score(list(requests))
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    single = [scorer.score([r])[0] for r in requests]
    single_s = time.perf_counter() - start
    tokens = sum(r.tokens_computed for r in batched)
    if tokens != sum(r.tokens_computed for r in single):
        raise RuntimeError("batched and one-by-one scoring computed different token counts")
    diff = max(float(np.max(np.abs(b.scores - s.scores))) for b, s in zip(batched, single))
    return ScoringFigures(len(requests), tokens, batched_s, single_s, diff)


def run_search(policy: Policy, scorer: Any, questions: Sequence[str], cfg: BackendBenchConfig
               ) -> tuple[SearchFigures, list[Any]]:
    """One batched beam search; returns its figures and the search results."""
    from prmsearch.api import Searcher

    recording = CountingPolicy(policy)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=cfg.max_new_tokens, delimiter=DELIMITER)
    searcher = Searcher(recording, scorer, "beam", n=cfg.n, width=cfg.width, sampling=sampling,
                        max_depth=cfg.max_depth, seed=cfg.seed)
    results = searcher.run(list(questions))
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"the search failed: {errors[0]}")
    ledger, stats = searcher.last_ledger, searcher.last_stats
    assert ledger is not None and stats is not None
    figures = SearchFigures(
        prompt_computed=ledger.prompt_tokens_computed,
        prompt_cached=ledger.prompt_tokens_cached,
        prompt_naive=recording.naive_prompt_tokens,
        generations=ledger.generations,
        generated_tokens=ledger.generated_tokens,
        prm_computed=ledger.prm_tokens_computed,
        prm_cached=ledger.prm_tokens_cached,
        wall_s=stats.wall_s,
        policy_s=stats.policy_s,
        scorer_s=stats.scorer_s,
        depth=max(int(max(r.tree.depth)) for r in results),
        nodes=sum(len(r.tree) for r in results),
    )
    return figures, results


def compare_trees(first: Sequence[Any], second: Sequence[Any]) -> tuple[bool, int, float]:
    """(same nodes and step texts?, nodes compared, max |score difference| over shared nodes)."""
    same, count, diff = True, 0, 0.0
    for a, b in zip(first, second, strict=True):
        ta, tb = a.tree, b.tree
        if list(ta.parent) != list(tb.parent) or list(ta.step_text) != list(tb.step_text):
            same = False
        shared = min(len(ta), len(tb))
        for node in range(1, shared):
            if ta.step_text[node] == tb.step_text[node]:
                diff = max(diff, abs(ta.score[node] - tb.score[node]))
        count += shared - 1
    return same, count, diff


def run_backend_bench(cfg: BackendBenchConfig, log: Log = quiet_log) -> BackendFigures:
    """Build the models, then measure throughput, run A (reuse) and run B (no reuse)."""
    from prmsearch.policies.hf import HFPolicy
    from prmsearch.scorers.hf import HFPRMScorer

    tok = bench_tokenizer()
    policy_model = build_policy_model(cfg.policy, tok, seed=cfg.seed)
    shape_step_lengths(policy_model, tok, cfg.mean_step_tokens)
    prm_model = build_prm_model(cfg.prm, tok, seed=cfg.seed + 1)
    budget = {"max_batch_tokens": cfg.max_batch_tokens}
    no_cache = {"prefix_cache_tokens": 0, "score_cache_entries": 0, **budget}
    fresh_prm = HFPRMScorer.from_model(prm_model, tok, "qwen-prm", **no_cache)

    rng = np.random.default_rng(cfg.seed)
    log(f"PRM throughput: {cfg.score_requests} requests, batched vs one by one")
    scoring = measure_scoring(fresh_prm, make_score_requests(cfg, rng))
    texts = TextMaker(rng)
    questions = [texts.question(cfg.question_words) for _ in range(cfg.problems)]

    log(f"run A: beam search depth {cfg.max_depth}, all reuse on")
    policy_a = HFPolicy.from_model(policy_model, tok, prompt_format="qwen25-math-cot", **budget)
    prm_a = HFPRMScorer.from_model(prm_model, tok, "qwen-prm", **budget)
    reuse, results_a = run_search(policy_a, prm_a, questions, cfg)
    log("run B: the same search, every cache off")
    policy_b = HFPolicy.from_model(policy_model, tok, prompt_format="qwen25-math-cot",
                                   prefix_cache_tokens=0, **budget)
    baseline, results_b = run_search(policy_b, fresh_prm, questions, cfg)
    same, nodes, diff = compare_trees(results_a, results_b)
    return BackendFigures(
        config=cfg,
        policy_parameters=policy_a.num_parameters,
        prm_parameters=prm_a.num_parameters,
        scoring=scoring,
        reuse=reuse,
        baseline=baseline,
        same_samples=same,
        nodes_compared=nodes,
        score_max_abs_diff=diff,
    )
