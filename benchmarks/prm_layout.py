"""PRM tokens/s of packed against padded forwards, and a call's shared question run once against
by every input, side by side on the same real solutions.

Three workloads, all from saved solutions (``prmsearch aggregate`` rows, e.g. a best-of-16 run's
``samples.jsonl`` restored with ``scripts/export_samples.py``):

* ``whole``: each problem's solutions scored in one call with every cache off, as best-of-N
  rescoring does (and, for reference, the same solutions one call each);
* ``steps``: a beam-like walk, each problem's solutions scored one step deeper per call with the
  prefix and score caches on, so every call scores new steps after cached prefixes;
* ``shared``: each problem's solutions in one call with the prefix cache on (emptied before each
  problem), the question they share run once first (``shared_prefix_tokens``) or by every
  solution (``shared_prefix_tokens=0``), in the packed layout.

Layouts alternate problem by problem (the order swaps each time), so a noisy shared machine
slows both alike; the scores of the two layouts are compared (max abs difference).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.benchmarks.analysis.aggregate import load_aggregate_rows, split_steps
from prmsearch.scorers.base import ScoreRequest

LAYOUTS = ("padded", "packed")
WORKLOADS = ("whole", "steps", "shared")


@dataclass(frozen=True)
class LayoutBenchConfig:
    """What to score and with which PRM (validated at construction)."""

    samples: Path
    prm: str
    family: str
    problems: int = 8
    per_problem: int = 16
    delimiter: str = "\n\n"
    prm_args: dict[str, Any] = field(default_factory=dict)
    workloads: tuple[str, ...] = WORKLOADS

    def __post_init__(self) -> None:
        if not Path(self.samples).is_file():
            raise FileNotFoundError(
                f"samples file {self.samples} not found: restore one with "
                "`python scripts/export_samples.py restore ...` (docs/real-models-laptop.md)"
            )
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        if unknown or not self.workloads:
            raise ValueError(f"workloads must be some of {', '.join(WORKLOADS)}; got {list(self.workloads)}")
        for name in ("problems", "per_problem"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")


@dataclass
class LayoutFigures:
    """Tokens computed and seconds spent per layout and workload."""

    workload: str
    tokens: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    max_score_diff: float = 0.0

    def tokens_per_s(self, layout: str) -> float:
        return self.tokens[layout] / max(self.seconds[layout], 1e-9)

    def speedup(self, layout: str = "packed", against: str = "padded") -> float:
        return self.tokens_per_s(layout) / max(self.tokens_per_s(against), 1e-9)


def load_problems(cfg: LayoutBenchConfig) -> list[list[ScoreRequest]]:
    """Each problem's solutions as score requests (first ``problems`` problems)."""
    rows, _ = load_aggregate_rows(cfg.samples, skip_bad_rows=True)
    out: list[list[ScoreRequest]] = []
    for row in rows[: cfg.problems]:
        requests = []
        for response in row.responses[: cfg.per_problem]:
            steps = split_steps(response, cfg.delimiter)
            if steps:
                requests.append(ScoreRequest(row.question, steps))
        if requests:
            out.append(requests)
    return out


def _timed(call: Callable[[], list[Any]]) -> tuple[list[Any], float]:
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def _scores(results: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(r.scores, dtype=np.float64) for r in results])


def score_in_turns(scorers: dict[str, Any], names: Sequence[str], turn: int,
                   requests: list[ScoreRequest], fig: LayoutFigures) -> dict[str, np.ndarray]:
    """Score ``requests`` in one call with each named scorer, caches emptied before and after,
    the order swapped on odd turns (a noisy machine slows both alike); time and tokens go into
    ``fig``, and each scorer's scores come back by name."""
    got: dict[str, np.ndarray] = {}
    for name in (names if turn % 2 == 0 else names[::-1]):
        scorer = scorers[name]
        scorer.clear_caches()
        results, took = _timed(lambda s=scorer, rs=requests: s.score(rs))
        fig.seconds[name] += took
        fig.tokens[name] += sum(r.tokens_computed for r in results)
        got[name] = _scores(results)
        scorer.clear_caches()
    return got


def bench_whole(scorers: dict[str, Any], problems: list[list[ScoreRequest]]) -> LayoutFigures:
    """Every solution of a problem in one call, caches off; plus one call per solution."""
    names = (*LAYOUTS, "one-by-one")
    fig = LayoutFigures("whole", dict.fromkeys(names, 0), dict.fromkeys(names, 0.0))
    for i, requests in enumerate(problems):
        got = score_in_turns(scorers, LAYOUTS, i, requests, fig)
        single = scorers["padded"]
        results, took = _timed(lambda s=single, rs=requests: [s.score([r])[0] for r in rs])
        fig.seconds["one-by-one"] += took
        fig.tokens["one-by-one"] += sum(r.tokens_computed for r in results)
        fig.max_score_diff = max(fig.max_score_diff,
                                 float(np.max(np.abs(got["packed"] - got["padded"]))))
    return fig


def bench_steps(scorers: dict[str, Any], problems: list[list[ScoreRequest]]) -> LayoutFigures:
    """One step deeper per call, prefix and score caches on (each call scores new steps)."""
    fig = LayoutFigures("steps", dict.fromkeys(LAYOUTS, 0), dict.fromkeys(LAYOUTS, 0.0))
    for i, requests in enumerate(problems):
        order = LAYOUTS if i % 2 == 0 else LAYOUTS[::-1]
        depth = max(len(r.steps) for r in requests)
        for name in order:
            scorer = scorers[name]
            scorer.clear_caches()
            for k in range(1, depth + 1):
                batch = [ScoreRequest(r.question, r.steps[:k]) for r in requests
                         if len(r.steps) >= k]
                results, took = _timed(lambda s=scorer, b=batch: s.score(b))
                fig.seconds[name] += took
                fig.tokens[name] += sum(r.tokens_computed for r in results)
            scorer.clear_caches()
        # same scores: the whole solutions once more, fresh, under both layouts
        want = _scores(scorers["padded"].score(requests))
        got = _scores(scorers["packed"].score(requests))
        fig.max_score_diff = max(fig.max_score_diff, float(np.max(np.abs(got - want))))
        for name in LAYOUTS:
            scorers[name].clear_caches()
    return fig


SHARING = ("not shared", "shared")


def bench_shared(scorers: dict[str, Any], problems: list[list[ScoreRequest]]) -> LayoutFigures:
    """Each problem's solutions in one call, caches emptied first: the shared question run once
    against run by every solution (same inputs, so seconds compare directly)."""
    fig = LayoutFigures("shared", dict.fromkeys(SHARING, 0), dict.fromkeys(SHARING, 0.0))
    for i, requests in enumerate(problems):
        got = score_in_turns(scorers, SHARING, i, requests, fig)
        fig.max_score_diff = max(fig.max_score_diff,
                                 float(np.max(np.abs(got["shared"] - got["not shared"]))))
    return fig


def make_sharing_scorers(cfg: LayoutBenchConfig) -> dict[str, Any]:
    """Two packed scorers of one PRM with the caches on: shared prefixes run once, or not."""
    from prmsearch.scorers.hf import HFPRMScorer

    shared = HFPRMScorer(cfg.prm, cfg.family, layout="packed", **cfg.prm_args)
    alone = HFPRMScorer.from_model(shared.model, shared.tokenizer, cfg.family, layout="packed",
                                   shared_prefix_tokens=0, **cfg.prm_args)
    return {"shared": shared, "not shared": alone}


def make_scorers(cfg: LayoutBenchConfig, caches: bool) -> dict[str, Any]:
    """A padded and a packed scorer of the same PRM (one model, loaded once)."""
    from prmsearch.scorers.hf import HFPRMScorer

    off = {} if caches else {"prefix_cache_tokens": 0, "score_cache_entries": 0}
    padded = HFPRMScorer(cfg.prm, cfg.family, layout="padded", **off, **cfg.prm_args)
    packed = HFPRMScorer.from_model(padded.model, padded.tokenizer, cfg.family, layout="packed",
                                    **off, **cfg.prm_args)
    return {"padded": padded, "packed": packed}


def run_layout_bench(cfg: LayoutBenchConfig) -> list[LayoutFigures]:
    """The chosen workloads (packed against padded; shared against not) on the first
    ``cfg.problems`` problems."""
    problems = load_problems(cfg)
    if not problems:
        raise ValueError(f"{cfg.samples} holds no solution with a step")
    figures = []
    if "whole" in cfg.workloads:
        figures.append(bench_whole(make_scorers(cfg, caches=False), problems))
    if "steps" in cfg.workloads:
        figures.append(bench_steps(make_scorers(cfg, caches=True), problems))
    if "shared" in cfg.workloads:
        figures.append(bench_shared(make_sharing_scorers(cfg), problems))
    return figures


def figure_lines(figures: Sequence[LayoutFigures]) -> list[str]:
    """One printed line per workload and layout."""
    lines = []
    for fig in figures:
        for name in fig.tokens:
            lines.append(f"{fig.workload:6s} {name:11s} {fig.tokens[name]:9,d} tokens "
                         f"{fig.seconds[name]:8.2f} s {fig.tokens_per_s(name):9,.0f} tokens/s")
        if fig.workload == "shared":  # the same inputs either way: compare seconds
            ratio = fig.seconds["not shared"] / max(fig.seconds["shared"], 1e-9)
            lines.append(f"{fig.workload:6s} time not shared / shared {ratio:.2f}x "
                         f"(max score difference {fig.max_score_diff:.1e})")
            continue
        lines.append(f"{fig.workload:6s} packed / padded {fig.speedup():.2f}x "
                     f"(max score difference {fig.max_score_diff:.1e})")
    return lines
