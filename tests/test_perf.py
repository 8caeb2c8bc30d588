"""``python -m benchmarks.perf``: one table with a row per figure, thresholds held, every figure in JSON."""

from __future__ import annotations

import json
import math
import re

import pytest

from benchmarks.perf import main
from benchmarks.suite import (
    MEASURES,
    THRESHOLDS,
    PerfConfig,
    PerfRow,
    Threshold,
    engine_ratio_rows,
    equal_compute_rows,
    gpu_rows,
)

HEADER = "| measure | prmsearch | baseline | ratio or figure | threshold | holds? |"


def write_summary(folder) -> None:
    runs = [
        {"strategy": "best_of_n", "budget": 1, "seed": 0, "accuracy": 0.4, "flops": 1e8},
        {"strategy": "best_of_n", "budget": 4, "seed": 0, "accuracy": 0.5, "flops": 4e8},
        {"strategy": "beam", "budget": 1, "seed": 0, "accuracy": 0.3, "flops": 2e8},
        {"strategy": "beam", "budget": 4, "seed": 0, "accuracy": 0.7, "flops": 8e8},
    ]
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"dataset": "toy", "n_problems": 4, "runs": runs}))


def gpu_report() -> dict:
    return {
        "environment": {"device": "NVIDIA H200"},
        "assumptions": [],
        "measurements": [
            {"name": "PRM scoring, max_batch_tokens=8192", "measured_tps": 30000.0,
             "roofline_tps": 60000.0, "ratio": 0.5, "error": None},
            {"name": "policy decode, batch 64", "measured_tps": None, "roofline_tps": 9000.0,
             "ratio": None, "error": "OutOfMemoryError: CUDA out of memory"},
        ],
    }


def table_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(HEADER)
    body = [line for line in lines[start + 2 :] if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in body]


def test_perf_quick_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    results = tmp_path / "bench"
    write_summary(results)
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps(gpu_report()))
    out = tmp_path / "perf.json"
    # engine-ratio starts vLLM engines: its own test runs in tests/vllm on the shared engine
    code = main(["--quick", "--threads", "1", "--results", str(results), "--gpu-json", str(gpu),
                 "--json", str(out), "--skip", "engine-ratio"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert HEADER in text
    rows = table_rows(text)
    assert all(len(r) == 6 for r in rows)
    measures = [r[0].split(":")[0] for r in rows]
    assert set(measures) == set(MEASURES) - {"engine-ratio"}
    assert measures == sorted(measures, key=MEASURES.index)  # table order
    assert measures.count("overhead") == 4
    assert measures.count("prefix-reuse") == 3 and measures.count("incremental-prm") == 2
    for row in rows:
        measure, figure, threshold, holds = row[0].split(":")[0], row[3], row[4], row[5]
        if measure in THRESHOLDS:
            assert threshold == THRESHOLDS[measure].text()
            assert holds in ("yes", "no") or holds.startswith("n/a (depth") or holds == "no (answers differ)"
            number = float(re.match(r"[\d.]+", figure).group())
            assert number > 0 and math.isfinite(number)
        else:
            assert threshold == "-" and holds == "-"
    data = json.loads(out.read_text())
    assert len(data["rows"]) == len(rows)
    figures = data["figures"]
    assert {"overhead", "arith", "backends", "equal_compute", "gpu"} <= set(figures)
    arith = figures["arith"]
    assert arith["same_answers"] is True  # batched == one at a time, same seeds
    assert arith["speedup"] > 0 and arith["prompt_ratio"] > 1 and arith["prm_ratio"] > 1
    assert figures["backends"]["reuse"]["depth"] >= 8
    assert all(f["driver_us_per_node"] > 0 for f in figures["overhead"])
    equal = next(r for r in data["rows"] if r["measure"] == "equal-compute")
    assert equal["prmsearch"] == "beam 50.0%" and equal["baseline"] == "best_of_n 50.0%"
    gpu_cells = [r for r in rows if r[0].startswith("gpu:")]
    assert gpu_cells[0][3] == "50.0% of roofline" and gpu_cells[1][1].startswith("FAILED")


def test_perf_without_results_or_gpu_says_how_to_get_them(capsys):
    code = main(["--skip", "overhead,arith,backends,engine-ratio"])
    text = capsys.readouterr().out
    assert code == 0
    rows = table_rows(text)
    assert [r[0].split(":")[0] for r in rows] == ["equal-compute", "gpu"]
    assert rows[0][1].startswith("not measured: pass --results")
    assert rows[1][1].startswith("not measured")


def test_perf_rejects_unknown_skip_and_missing_results(tmp_path, capsys):
    assert main(["--skip", "overhead,typo"]) == 2
    assert "unknown measure(s) to skip: typo" in capsys.readouterr().err
    assert main(["--skip", "overhead,arith,backends,gpu", "--results", str(tmp_path)]) == 2
    assert "no summary at" in capsys.readouterr().err


def test_targets_and_verdicts():
    assert THRESHOLDS["overhead"].text() == "<= 20 us/node"
    assert THRESHOLDS["prefix-reuse"].text() == ">= 10x at depth >= 8"
    assert THRESHOLDS["overhead"].verdict(19.9) == "yes" and THRESHOLDS["overhead"].verdict(20.1) == "no"
    assert THRESHOLDS["batching"].verdict(4.0) == "yes" and THRESHOLDS["batching"].verdict(3.9) == "no"
    assert THRESHOLDS["incremental-prm"].verdict(9.0, depth=7) == "n/a (depth 7 < 8)"
    assert THRESHOLDS["incremental-prm"].verdict(4.0, depth=10) == "no"
    assert Threshold(2.0).verdict(2.0, depth=1) == "yes"  # no depth condition


def test_gpu_and_equal_compute_rows_without_inputs():
    (row,) = gpu_rows(None, has_gpu=False)
    assert row.prmsearch.startswith("not measured here (no GPU)") and "scripts/gpu_bench.py" in row.label
    (row,) = gpu_rows(None, has_gpu=True)
    assert row.prmsearch.startswith("not measured yet")
    (row,) = equal_compute_rows(None)
    assert isinstance(row, PerfRow) and row.holds == "-"
    (row,) = engine_ratio_rows(None, "vLLM is not installed")
    assert row.measure == "engine-ratio" and row.prmsearch == "not measured: vLLM is not installed"


def test_engine_ratio_rows_hold_each_engine_to_its_target():
    from benchmarks.engine_ratio import RatioFigures

    offline = RatioFigures("vllm", "beam", 32, 10.0, 40_000, 4.0, 40_000, 0.9)  # 4,000 vs 10,000 tok/s
    server = RatioFigures("openai", "best_of_n", 32, 5.0, 40_000, 3.5, 40_000, 0.8)
    rows = engine_ratio_rows([offline, server])
    verdicts = [(r.figure, r.threshold, r.holds) for r in rows]
    assert verdicts == [("0.40", ">= 0.8", "no"), ("0.70", ">= 0.7", "yes")]
    assert "offline vLLM engine" in rows[0].label and "vLLM OpenAI server" in rows[1].label


def test_real_model_ratio_rows_report_prm_rate_prefix_hits_and_idle_engine():
    from benchmarks.engine_ratio import RatioFigures

    real = RatioFigures("vllm", "beam", 8, 100.0, 5_000, 40.0, 5_000, 0.25, "gsm8k (qwen)",
                        prm_tokens=20_000, prompt_tokens_cached=3_000,
                        prompt_tokens_computed=1_000, policy_s=80.0, budget=16)
    assert real.prm_tok_s == 200.0 and real.prefix_hit_rate == 0.75
    assert abs(real.engine_idle_share - 0.2) < 1e-12
    (row,) = engine_ratio_rows([real])
    assert "N=16" in row.label and "8 gsm8k (qwen) problems" in row.label
    assert "PRM 200 tokens/s" in row.label and "prefix-cache hits 75%" in row.label
    assert "engine idle 20%" in row.label and "raw to EOS" not in row.label
    assert real.to_dict()["engine_idle_share"] == real.engine_idle_share


def test_ratio_rows_split_the_gap_at_the_raw_call_to_eos():
    """The raw call with natural sample lengths (to EOS) sits between the rectangular one and
    the search: framework / raw to EOS is what the search itself loses."""
    import math

    from benchmarks.engine_ratio import RatioFigures, table

    f = RatioFigures("vllm", "best_of_n", 4, 100.0, 20_000, 80.0, 20_000, 0.3, "gsm8k (qwen)",
                     budget=16, natural_s=100.0, natural_tokens=21_000)
    assert f.ratio == 0.8 and f.natural_tok_s == 210.0 and abs(f.natural_ratio - 200 / 210) < 1e-12
    (row,) = engine_ratio_rows([f])
    assert "raw to EOS 210 tokens/s, framework / raw to EOS 0.95" in row.label
    assert row.figure == "0.80"  # the threshold stays held against the rectangular call
    assert "| 210 | 0.95 |" in table([f])
    unmeasured = RatioFigures("vllm", "beam", 4, 1.0, 10, 1.0, 10, 0.0)
    assert math.isnan(unmeasured.natural_ratio)
    assert "raw to EOS" not in engine_ratio_rows([unmeasured])[0].label


def test_a_real_recipe_without_a_vllm_policy_is_refused_by_name(tmp_path):
    from benchmarks.engine_ratio import EngineRatioConfig, recipe_workload

    recipe = tmp_path / "hf.yaml"
    recipe.write_text("name: x\npolicy: {backend: hf, model: some/model}\nprm: {family: "
                      "policy-confidence}\ndataset: {name: gsm8k}\nstrategies: {beam: {}}\n"
                      "budgets: [4]\n")
    with pytest.raises(ValueError, match="needs a vllm policy"):
        recipe_workload(EngineRatioConfig(recipe=str(recipe)))


def test_perf_cli_passes_the_ratio_flags_to_the_engine_ratio_config(monkeypatch, capsys):
    import benchmarks.suite as suite

    seen = {}

    def fake_run(cfg, log):
        seen["cfg"] = cfg
        return suite.PerfReport([], {})

    monkeypatch.setattr(suite, "run_perf", fake_run)
    assert main(["--real-recipe", "r.yaml", "--ratio-problems", "3", "--ratio-budget", "4",
                 "--ratio-engines", "vllm", "--ratio-strategies", "beam,best_of_n"]) == 0
    e = seen["cfg"].engine_ratio
    assert (e.recipe, e.problems, e.budget, e.engines, e.strategies) == (
        "r.yaml", 3, 4, ("vllm",), ("beam", "best_of_n"))


def test_config_is_validated():
    with pytest.raises(ValueError, match="overhead_problems"):
        PerfConfig(overhead_problems=0)
    quick = PerfConfig.quick(skip={"gpu"})
    assert quick.skip == frozenset({"gpu"}) and quick.overhead_problems == 20
    assert not quick.wants("gpu") and quick.runs("arith", ("batching",))
    assert not PerfConfig.quick(skip={"batching", "prefix-reuse", "incremental-prm"}).runs(
        "arith", ("batching", "prefix-reuse", "incremental-prm"))
