"""``python -m benchmarks.perf``: the engine's performance measures in one table.

Each measure reuses the module that owns it; this module only runs them, holds their figures
against the thresholds and lays out one row per figure:

* ``overhead``: driver microseconds per expanded node with instant backends
  (:mod:`benchmarks.overhead`); threshold at most 20.
* ``batching``: beam search over arithmetic problems batched by the driver vs one problem at a
  time, same seeds, on the embedded models (:mod:`benchmarks.batching`); threshold 4x.
* ``prefix-reuse``: policy prompt tokens computed vs the naive loop (n x prompt per request),
  from the arithmetic run and from the random-weight depth-10 search of
  :mod:`benchmarks.backend_bench` (arithmetic paths can be shallower); threshold 10x at
  depth >= 8.
* ``incremental-prm``: PRM tokens computed vs re-scoring every full path, from the same two
  runs; threshold 5x at depth >= 8.
* ``equal-compute``: accuracy at equal FLOPs from a ``prmsearch bench`` results folder
  (:mod:`prmsearch.benchmarks.analysis.equal_compute`); no threshold, reported.
* ``engine-ratio``: the search's generated tokens per second over the raw engine's on the same
  token count, for beam search, particle filtering and best-of-N on the offline vLLM engine
  and on a vLLM OpenAI server (:mod:`benchmarks.engine_ratio`); thresholds 0.8 offline, 0.7
  over HTTP; needs vLLM (the row says so without it).
* ``gpu``: measured/roofline throughput from the JSON of ``scripts/gpu_bench.py``; reported.

Two runs feed several measures and can be skipped by name too: ``arith`` (the embedded-model
engine run) and ``backends`` (the random-weight deep search).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.backend_bench import BackendBenchConfig, BackendFigures
from benchmarks.batching import ArithEngineConfig, EngineFigures
from benchmarks.engine_ratio import EngineRatioConfig, RatioFigures
from benchmarks.overhead import OverheadFigures
from benchmarks.synthetic_models import Log, quiet_log
from prmsearch.benchmarks.analysis.equal_compute import EqualCompute, equal_compute, strategy_curves

__all__ = [
    "MEASURES",
    "SOURCES",
    "THRESHOLDS",
    "PerfConfig",
    "PerfReport",
    "PerfRow",
    "Threshold",
    "arith_rows",
    "backend_rows",
    "engine_ratio_rows",
    "equal_compute_rows",
    "gpu_rows",
    "load_summary",
    "overhead_rows",
    "run_perf",
]

#: The measures, in table order.
MEASURES = ("overhead", "batching", "prefix-reuse", "incremental-prm", "equal-compute", "engine-ratio",
            "gpu")
#: Runs that feed several measures (skipping one drops its rows).
SOURCES = ("arith", "backends")

@dataclass(frozen=True)
class Threshold:
    """A regression threshold of one figure: the bound it is expected to hold.

    Attributes:
        value: the bound.
        at_most: the figure must be at most ``value`` (else at least).
        unit: appended to numbers (``"x"`` for ratios).
        min_depth: the threshold applies only to searches at least this deep.
    """

    value: float
    at_most: bool = False
    unit: str = "x"
    min_depth: int | None = None

    def text(self) -> str:
        """E.g. ``<= 20 us/node`` or ``>= 10x at depth >= 8``."""
        bound = f"{'<=' if self.at_most else '>='} {self.value:g}{self.unit}"
        return bound if self.min_depth is None else f"{bound} at depth >= {self.min_depth}"

    def verdict(self, figure: float, depth: int | None = None) -> str:
        """``yes``/``no``, or ``n/a (...)`` when the search was too shallow for the threshold."""
        if self.min_depth is not None and depth is not None and depth < self.min_depth:
            return f"n/a (depth {depth} < {self.min_depth})"
        ok = figure <= self.value if self.at_most else figure >= self.value
        return "yes" if ok else "no"


THRESHOLDS: dict[str, Threshold] = {
    "overhead": Threshold(20.0, at_most=True, unit=" us/node"),
    "batching": Threshold(4.0),
    "prefix-reuse": Threshold(10.0, min_depth=8),
    "incremental-prm": Threshold(5.0, min_depth=8),
}

#: framework / raw engine throughput, per engine
ENGINE_RATIO_THRESHOLDS: dict[str, Threshold] = {
    "vllm": Threshold(0.8, unit=""), "openai": Threshold(0.7, unit=""),
}


@dataclass(frozen=True)
class PerfRow:
    """One row of the table.

    Attributes:
        measure: one of :data:`MEASURES`.
        label: what exactly was measured.
        prmsearch: the engine's figure, as printed.
        baseline: what it is compared with, as printed (``-`` when nothing).
        figure: the ratio or figure held against the threshold, as printed.
        threshold: the threshold, as printed (``-`` when none).
        holds: ``yes``, ``no``, ``n/a (why)`` or ``-`` (no threshold).
        value: the figure as a number (None when not measured).
    """

    measure: str
    label: str
    prmsearch: str
    baseline: str = "-"
    figure: str = "-"
    threshold: str = "-"
    holds: str = "-"
    value: float | None = None

    def cells(self) -> list[str]:
        """The row's markdown cells."""
        return [f"{self.measure}: {self.label}", self.prmsearch, self.baseline, self.figure,
                self.threshold, self.holds]


def _ratio_row(measure: str, label: str, ours: str, theirs: str, ratio: float,
               depth: int | None = None) -> PerfRow:
    threshold = THRESHOLDS[measure]
    return PerfRow(measure, label, ours, theirs, f"{ratio:.1f}x", threshold.text(),
                   threshold.verdict(ratio, depth), ratio)


# ---------------------------------------------------------------------------------- rows
def overhead_rows(figures: list[OverheadFigures]) -> list[PerfRow]:
    """One row per configuration: driver us per expanded node."""
    threshold = THRESHOLDS["overhead"]
    rows = []
    for f in figures:
        us = f.driver_us_per_node
        rows.append(PerfRow(
            "overhead", f"{f.label}, {f.problems:,} problems, instant backends "
            f"({f.backend_s:.2f} s inside them, subtracted)",
            f"{f.wall_s - f.backend_s:.2f} s driver / {f.nodes:,} nodes", "-",
            f"{us:.1f} us/node", threshold.text(), threshold.verdict(us), us,
        ))
    return rows


def arith_rows(f: EngineFigures, cfg: ArithEngineConfig) -> list[PerfRow]:
    """Batching, prefix reuse and incremental PRM rows of the embedded-model engine run."""
    run = f"beam N={cfg.n} width {cfg.width}, {f.problems} arith problems"
    batching = _ratio_row(
        "batching", f"{run} (same answers: {f.same_answers}; accuracy {100 * f.accuracy:.1f}%)",
        f"{f.batched_s:.2f} s batched", f"{f.sequential_s:.2f} s one at a time", f.speedup,
    )
    if not f.same_answers:
        batching = PerfRow(**{**asdict(batching), "holds": "no (answers differ)"})
    return [
        batching,
        _ratio_row("prefix-reuse", f"policy prompt tokens, {run} (depth {f.max_depth})",
                   f"{f.prompt_computed:,} computed", f"{f.prompt_naive:,} naive (n x prompt)",
                   f.prompt_ratio, f.max_depth),
        _ratio_row("incremental-prm", f"PRM tokens, {run} (depth {f.max_depth})",
                   f"{f.prm_computed:,} computed", f"{f.prm_naive:,} full re-score",
                   f.prm_ratio, f.max_depth),
    ]


def backend_rows(f: BackendFigures) -> list[PerfRow]:
    """Prefix reuse (vs naive and vs no KV reuse) and incremental PRM rows of the deep search."""
    a, b, cfg = f.reuse, f.baseline, f.config
    run = f"random-weight Qwen2 beam N={cfg.n} width {cfg.width}, {cfg.problems} problems, depth {a.depth}"
    return [
        _ratio_row("prefix-reuse", f"policy prompt tokens, {run}", f"{a.prompt_computed:,} computed",
                   f"{a.prompt_naive:,} naive (n x prompt)",
                   a.prompt_naive / max(1, a.prompt_computed), a.depth),
        _ratio_row("prefix-reuse", f"policy prompt tokens vs no prefix KV reuse, {run}",
                   f"{a.prompt_computed:,} computed", f"{b.prompt_computed:,} without reuse",
                   b.prompt_computed / max(1, a.prompt_computed), a.depth),
        _ratio_row("incremental-prm", f"PRM tokens, {run} (same scores: max diff "
                   f"{f.score_max_abs_diff:.0e})", f"{a.prm_computed:,} computed",
                   f"{b.prm_computed:,} full re-score", b.prm_computed / max(1, a.prm_computed), a.depth),
    ]


def equal_compute_rows(result: EqualCompute | None, source: str | None = None) -> list[PerfRow]:
    """At each FLOPs level of the reference, the best other strategy against the reference."""
    if result is None:
        return [PerfRow("equal-compute", "accuracy at the FLOPs of best_of_n's budgets",
                        "not measured: pass --results FOLDER (a `prmsearch bench` output)")]
    where = f" ({source})" if source else ""
    rows = []
    for level, lv in enumerate(result.levels):
        best = result.best_other(level)
        ref_acc = result.at(result.reference, level)
        if best is None or ref_acc is None:
            continue
        name, acc = best
        rows.append(PerfRow(
            "equal-compute", f"best strategy vs {result.reference} at {lv.flops:.3g} FLOPs/problem "
            f"(its n={lv.budget}){where}", f"{name} {100 * acc:.1f}%",
            f"{result.reference} {100 * ref_acc:.1f}%", f"{100 * (acc - ref_acc):+.1f} points",
            value=acc - ref_acc,
        ))
    return rows or [PerfRow("equal-compute", f"vs {result.reference}{where}",
                            "no other strategy within the reference's FLOPs range")]


def engine_ratio_rows(figures: list[RatioFigures] | None, why: str = "") -> list[PerfRow]:
    """One row per engine and strategy: the search's tokens/s over the raw engine call's."""
    if figures is None:
        return [PerfRow("engine-ratio", "framework / raw engine throughput (vLLM offline and server)",
                        f"not measured: {why}")]
    names = {"vllm": "offline vLLM engine", "openai": "vLLM OpenAI server"}
    rows = []
    for f in figures:
        threshold = ENGINE_RATIO_THRESHOLDS[f.engine]
        extra = "" if f.workload == "arith" else (
            f"; PRM {f.prm_tok_s:,.0f} tokens/s, prefix-cache hits {f.prefix_hit_rate:.0%}, "
            f"engine idle {f.engine_idle_share:.0%}")
        if f.natural_tokens:
            extra += (f"; raw to EOS {f.natural_tok_s:,.0f} tokens/s, framework / raw to EOS "
                      f"{f.natural_ratio:.2f}")
        rows.append(PerfRow(
            "engine-ratio", f"{f.strategy} N={f.budget} on the {names[f.engine]}, {f.problems} "
            f"{f.workload} problems, {f.framework_tokens:,} tokens (accuracy "
            f"{100 * f.accuracy:.1f}%){extra}",
            f"{f.framework_tok_s:,.0f} tokens/s", f"{f.raw_tok_s:,.0f} tokens/s raw (one call)",
            f"{f.ratio:.2f}", threshold.text(), threshold.verdict(f.ratio), f.ratio,
        ))
    return rows


def gpu_rows(report: Mapping[str, Any] | None, has_gpu: bool = False) -> list[PerfRow]:
    """Measured/roofline throughput per ``gpu_bench`` measurement, or a not-measured row."""
    if report is None:
        how = "run scripts/gpu_bench.py --out FILE, then pass --gpu-json FILE"
        what = "not measured yet" if has_gpu else "not measured here (no GPU)"
        return [PerfRow("gpu", "throughput vs roofline (figures from scripts/gpu_bench.py)",
                        f"{what}: {how}")]
    device = report.get("environment", {}).get("device", "?")
    rows = []
    for m in report.get("measurements", []):
        label = f"{m['name']} on {device} (scripts/gpu_bench.py)"
        if m.get("error") is not None:
            rows.append(PerfRow("gpu", label, f"FAILED: {m['error']}"))
            continue
        ratio = m.get("ratio")
        rows.append(PerfRow(
            "gpu", label, f"{m['measured_tps']:,.0f} tokens/s", f"{m['roofline_tps']:,.0f} roofline",
            "-" if ratio is None else f"{100 * ratio:.1f}% of roofline", value=ratio,
        ))
    return rows or [PerfRow("gpu", f"{device} (scripts/gpu_bench.py)", "no measurements in the JSON")]


# -------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class PerfConfig:
    """What ``python -m benchmarks.perf`` runs.

    Attributes:
        overhead_problems: problems per overhead configuration.
        arith: the embedded-model engine run (batching, prefix reuse, incremental PRM).
        backends: the random-weight deep search (prefix reuse, incremental PRM at depth >= 8).
        engine_ratio: the framework / raw engine throughput runs (vLLM offline and server).
        results: a ``prmsearch bench`` results folder (or its ``summary.json``) for the
            equal-compute row; None: that row says how to get it.
        gpu_json: the JSON written by ``scripts/gpu_bench.py --out``.
        skip: names from :data:`MEASURES` or :data:`SOURCES` to leave out.
    """

    overhead_problems: int = 1000
    arith: ArithEngineConfig = field(default_factory=ArithEngineConfig)
    backends: BackendBenchConfig = field(default_factory=BackendBenchConfig.full)
    engine_ratio: EngineRatioConfig = field(default_factory=EngineRatioConfig)
    results: Path | None = None
    gpu_json: Path | None = None
    skip: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        value = self.overhead_problems
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"overhead_problems must be an int >= 1, got {value!r}")
        object.__setattr__(self, "skip", frozenset(self.skip))
        unknown = sorted(self.skip - set(MEASURES) - set(SOURCES))
        if unknown:
            known = ", ".join((*MEASURES, *SOURCES))
            raise ValueError(f"unknown measure(s) to skip: {', '.join(unknown)}; known: {known}")
        for name in ("results", "gpu_json"):
            path = getattr(self, name)
            if path is not None:
                object.__setattr__(self, name, Path(path))

    @classmethod
    def quick(cls, **overrides: Any) -> PerfConfig:
        """Tiny sizes for tests: well under a minute on one CPU thread."""
        base = {
            "overhead_problems": 20,
            "arith": ArithEngineConfig(problems=4, n=4, width=2),
            "backends": BackendBenchConfig.quick(),
            "engine_ratio": EngineRatioConfig(problems=2, budget=4, engines=("vllm",),
                                              strategies=("best_of_n",)),
        }
        return cls(**{**base, **overrides})

    def wants(self, *names: str) -> bool:
        """Whether any of ``names`` (measures) is wanted."""
        return any(name not in self.skip for name in names)

    def runs(self, source: str, measures: tuple[str, ...]) -> bool:
        """Whether the run ``source`` is needed: not skipped, and some measure it feeds wanted."""
        return source not in self.skip and self.wants(*measures)


# -------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class PerfReport:
    """The rows and every figure behind them."""

    rows: list[PerfRow]
    figures: dict[str, Any]

    def table(self) -> str:
        """The one markdown table."""
        lines = ["| measure | prmsearch | baseline | ratio or figure | threshold | holds? |",
                 "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(row.cells()) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """Rows and figures as plain data."""
        return {"rows": [asdict(row) for row in self.rows], "figures": self.figures}


def load_summary(path: Path) -> dict[str, Any]:
    """A bench summary from a results folder (its ``summary.json``) or the file itself."""
    file = path / "summary.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no summary at {file}; run `prmsearch bench --out {path}` first")
    summary = json.loads(file.read_text())
    if not isinstance(summary, dict) or not isinstance(summary.get("runs"), list):
        raise ValueError(f"{file} is not a `prmsearch bench` summary (no 'runs' list)")
    return summary


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def run_perf(cfg: PerfConfig, log: Log = quiet_log) -> PerfReport:
    """Run every wanted measure, in table order, and collect the rows."""
    rows: list[PerfRow] = []
    figures: dict[str, Any] = {}
    if cfg.wants("overhead"):
        from benchmarks.overhead import run_overhead_suite

        log(f"overhead: 4 configurations x {cfg.overhead_problems} problems, instant backends")
        suite = run_overhead_suite(cfg.overhead_problems)
        figures["overhead"] = [{**asdict(f), "driver_us_per_node": f.driver_us_per_node} for f in suite]
        rows += overhead_rows(suite)
    engine_measures = ("batching", "prefix-reuse", "incremental-prm")
    arith: list[PerfRow] = []
    if cfg.runs("arith", engine_measures):
        from benchmarks.batching import run_arith_engine

        a = cfg.arith
        log(f"arith: beam N={a.n} width {a.width} over {a.problems} problems, batched then one at a time")
        engine = run_arith_engine(a)
        figures["arith"] = {"config": asdict(a), **engine.to_dict()}
        arith = arith_rows(engine, a)
    deep: list[PerfRow] = []
    if cfg.runs("backends", ("prefix-reuse", "incremental-prm")):
        from benchmarks.backend_bench import run_backend_bench

        log(f"backends: random-weight Qwen2 beam search to depth {cfg.backends.max_depth}")
        backend = run_backend_bench(cfg.backends, log)
        figures["backends"] = backend.to_dict()
        deep = backend_rows(backend)
    for measure in engine_measures:
        rows += [r for r in (*arith, *deep) if r.measure == measure]
    if cfg.wants("equal-compute"):
        if cfg.results is None:
            rows += equal_compute_rows(None)
        else:
            log(f"equal compute: {cfg.results}")
            summary = load_summary(cfg.results)
            if not strategy_curves(summary):
                raise ValueError(f"{cfg.results}: no run has a FLOPs figure (no ledgers)")
            result = equal_compute(summary)
            figures["equal_compute"] = {"source": str(cfg.results), **result.to_dict()}
            rows += equal_compute_rows(result, str(cfg.results))
    if cfg.wants("engine-ratio"):
        try:
            import vllm  # noqa: F401
        except ImportError:
            rows += engine_ratio_rows(None, "vLLM is not installed (pip install 'prmsearch[vllm]')")
        else:
            from benchmarks.engine_ratio import run_engine_ratio

            e = cfg.engine_ratio
            log(f"engine ratio: {', '.join(e.strategies)} N={e.budget} on {', '.join(e.engines)}, "
                f"{e.problems} problems")
            ratios = run_engine_ratio(e, log)
            figures["engine_ratio"] = [f.to_dict() for f in ratios]
            rows += engine_ratio_rows(ratios)
    if cfg.wants("gpu"):
        report = json.loads(cfg.gpu_json.read_text()) if cfg.gpu_json is not None else None
        if report is not None:
            figures["gpu"] = report
        rows += gpu_rows(report, has_gpu=report is None and _has_gpu())
    return PerfReport([r for r in rows if r.measure not in cfg.skip], figures)
