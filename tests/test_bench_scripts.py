"""The benchmark scripts run end to end on a CPU and report sane figures.

Each script runs as a subprocess with one torch thread (a few seconds each on a 2-core CPU).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]


def script_or_module(name: str) -> list[str]:
    """The interpreter's arguments that run ``name``: a file under scripts/ or a module by ``-m``."""
    return [str(ROOT / "scripts" / name)] if name.endswith(".py") else ["-m", name]


def run_script(
    name: str, *args: str, threads: bool = True, timeout: int = 180
) -> subprocess.CompletedProcess:
    """Run ``scripts/<name>`` (a ``.py`` path) or the lab module ``name`` (``benchmarks.gpu_bench``,
    run with ``-m`` from the repository root) with the current interpreter, offline, on one CPU thread."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, *script_or_module(name), *(["--threads", "1"] if threads else []), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_gpu_bench_small_prints_table_and_writes_json(tmp_path):
    out = tmp_path / "gpu.json"
    proc = run_script("benchmarks.gpu_bench", "--small", "--out", str(out))
    assert "| measurement | tokens/s | roofline tokens/s | measured/roofline |" in proc.stdout
    assert "PRM roofline = 989 TFLOP/s" in proc.stdout
    data = json.loads(out.read_text())
    names = [m["name"] for m in data["measurements"]]
    assert sum(n.startswith("PRM scoring") for n in names) == 4
    assert sum(n.startswith("policy decode") for n in names) == 2
    for m in data["measurements"]:
        assert m["error"] is None, m
        assert m["name"] in proc.stdout
        assert m["tokens"] > 0 and m["seconds"] > 0
        assert m["measured_tps"] > 0 and m["roofline_tps"] > 0
        assert math.isfinite(m["ratio"]) and m["ratio"] > 0


def test_bench_backends_quick_shows_reuse_savings(tmp_path):
    out = tmp_path / "backends.json"
    proc = run_script("benchmarks.bench_backends", "--quick", "--json", str(out))
    assert "| measure | A | A value | B | B value | A's gain |" in proc.stdout
    for row in ("PRM scoring tokens/s", "PRM tokens computed", "policy prompt tokens computed"):
        assert row in proc.stdout
    data = json.loads(out.read_text())
    a, b, scoring = data["reuse"], data["baseline"], data["scoring"]
    assert a["depth"] >= 8 and b["depth"] == a["depth"]
    # the same search, with and without reuse: same samples, same scores
    assert data["same_samples"] is True
    assert data["score_max_abs_diff"] < 1e-4
    # incremental PRM scoring computes fewer tokens; the full re-score is exactly computed + cached
    assert b["prm_computed"] == a["prm_computed"] + a["prm_cached"]
    assert b["prm_computed"] > 2 * a["prm_computed"]
    # prefix reuse computes fewer prompt tokens than no reuse, which beats n x prompt per request
    assert a["prompt_naive"] > b["prompt_computed"] > 2 * a["prompt_computed"]
    assert a["generations"] == b["generations"] and a["generated_tokens"] == b["generated_tokens"]
    # throughput: batched and one-by-one score the same tokens to the same values
    assert scoring["tokens"] > 0 and scoring["batched_s"] > 0 and scoring["single_s"] > 0
    assert scoring["max_abs_diff"] < 1e-4


def test_bench_batching_small_run_gives_same_answers():
    proc = run_script("benchmarks.bench_batching", "--problems", "2", "--n", "4", "--width", "2")
    assert "| measure | prmsearch | naive | ratio |" in proc.stdout
    assert "wall s, beam over 2 problems (batched vs one at a time)" in proc.stdout
    assert "Same answers batched and one at a time: True" in proc.stdout


def test_bench_overhead_small_run_prints_every_configuration():
    proc = run_script("benchmarks.bench_overhead", "--problems", "5", threads=False)
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 5  # header + beam, mcts, best_of_n, particle_filter
    for row in rows[1:]:
        assert float(row.strip("|").split("|")[-1]) > 0  # driver us/node


def load_prm_kit():
    """The kit's library module (``python -m training.gpu_prm_kit`` is its command line)."""
    from training import prm_kit

    return prm_kit


def test_gpu_prm_kit_small_labels_trains_and_evaluates(tmp_path):
    out = tmp_path / "kit.json"
    proc = run_script("training.gpu_prm_kit", "--small", "--out", str(out))
    assert "| phase | figure | value |" in proc.stdout
    assert "FAILED" not in proc.stdout
    assert "estimate on an H200" in proc.stderr
    data = json.loads(out.read_text())
    assert data["estimate_s"]["total"] > 0
    phases = data["phases"]
    assert list(phases) == ["labelling", "training", "eval"]
    for name, figures in phases.items():
        assert figures["error"] is None, (name, figures)
        assert figures["phase_wall_s"] > 0
    label = phases["labelling"]
    assert label["problems"] == 6 and label["solutions"] == 12
    assert label["rollouts"] > 0 and label["generated_tokens"] > 0
    for key in ("problems_per_s", "generated_tokens_per_s", "policy_tokens_per_s"):
        assert math.isfinite(label[key]) and label[key] > 0, key
    train = phases["training"]
    assert train["data"].startswith("labelled") and train["rows"] == 8  # 4 of 6 problems x 2 samples
    for key in ("steps_per_s", "tokens_per_s", "loss_first", "loss_last"):
        assert math.isfinite(train[key]) and train[key] > 0, key
    assert train["peak_gpu_gb"] is None  # CPU
    ev = phases["eval"]
    assert ev["prm"] == "trained" and ev["data"] == "held-out labelled solutions"
    assert ev["solutions"] == 4 and ev["solutions_per_s"] > 0 and ev["tokens_per_s"] > 0
    assert ev["bias"]["solutions"] == 4 and ev["bias"]["problems"] == 2
    assert set(ev["bias"]) >= {"response", "step", "right_answer_wrong_step", "min_on_last_step"}


def test_gpu_prm_kit_refuses_cuda_without_a_gpu():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "training.gpu_prm_kit", "--device", "cuda"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "--small" in lines[0]


def test_gpu_prm_kit_default_sizes_fit_ten_minutes():
    """The real-size defaults fit the budget by the script's own (conservative) H200 estimate."""
    kit = load_prm_kit()
    cfg = kit.KitConfig()
    parts = kit.estimate(cfg, prompt_tokens=kit.policy_prompt_tokens("x" * 130))
    assert 60 < sum(parts.values()) < 60 * cfg.budget_minutes
    assert kit.parameters(kit.SHAPE_1_5B, lm_head=True) == 1_543_714_304
    assert kit.parameters(kit.SHAPE_7B, lm_head=False) == 7_070_619_136


@pytest.mark.slow
def test_prm_label_study_smoke(tmp_path):
    """The label-source study end to end on tiny settings: three consensus labelling runs (the
    policy as its own arithmetic judge), one PRM per source, validation choice, test read once."""
    from prmsearch.arith.models import default_policy_path
    from prmsearch.cli import main

    policy = str(default_policy_path())
    for split in ("train", "validation", "test"):
        args = ["label", "--method", "consensus", "--split", split, "--limit", "3", "--samples", "2",
                "--rollouts", "1", "--max-solution-tokens", "96", "--judge", policy, "--judge-backend",
                "arith-judge", "--judge-samples", "1", "--out", str(tmp_path / f"labels-{split}"),
                "--no-progress"]  # fmt: skip
        assert main(args) == 0
    out = tmp_path / "study"
    proc = run_script("training.prm_label_study", "--smoke", "--labels", str(tmp_path), "--base", policy,
                      "--out", str(out))  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert set(report["quality"]) == {"train", "validation", "test"}
    assert report["trained"] and set(report["chosen_lr"]) == set(report["trained"])
    for split in ("validation", "test"):
        oracle = report[split]["exact checker (oracle)"]
        assert oracle["steps"]["step"]["f1"] == 1.0  # the checker labels are the reference
        assert all(0.0 <= v <= 1.0 for r in report[split].values() for v in r["search"].values())
    assert "## Test, read once" in proc.stdout and (out / "report.md").is_file()


def test_load_serve_small_run_reports_latency_and_head_of_line(tmp_path):
    pytest.importorskip("fastapi")
    out = tmp_path / "load.json"
    proc = run_script("load_serve.py", "--clients", "6", "--requests", "12", "--large-budget", "256",
                      "--json", str(out), "--", "--threads", "1", "--max-in-flight", "4", "--max-queued", "1",
                      threads=False)
    assert "| ok | errors | 429s honoured | p50 s | p90 s | p99 s | max s |" in proc.stdout
    assert "head-of-line: beam-16 alone" in proc.stdout
    figures = json.loads(out.read_text())
    load = figures["load"]
    assert load["ok"] == 12 and load["errors"] == 0
    assert load["rate_limited"] > 0  # 6 clients, 4 places and 1 queue slot: some were told to wait
    assert 0 < load["p50_s"] <= load["p99_s"] <= load["max_s"]
    assert load["health_after"]["in_flight"] == 0 and load["health_after"]["queued"] == 0
    assert figures["head_of_line"]["small_status"] == 200 and figures["head_of_line"]["large_status"] == 200


def test_export_samples_gives_aggregate_rows_of_a_saved_bench(tmp_path):
    from prmsearch.cli import main

    run = tmp_path / "run"
    assert main(["bench", "--strategies", "best_of_n", "--budgets", "4", "--limit", "3", "--save-trees",
                 "--out", str(run), "--no-progress", "--threads", "1"]) == 0
    samples, stripped, restored = tmp_path / "s.jsonl", tmp_path / "stripped.jsonl", tmp_path / "r.jsonl"
    run_script("export_samples.py", "export", str(run), str(samples), "--budget", "4", threads=False)
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    results = {r["qid"]: r for r in map(json.loads, (run / "results.jsonl").read_text().splitlines())}
    assert [r["id"] for r in rows] == list(results)
    for row in rows:
        assert len(row["responses"]) == 4 and len(row["scores"]) == 4
        assert row["answer"] == results[row["id"]]["gold"] and row["question"]
        for response, scores in zip(row["responses"], row["scores"], strict=True):
            assert len(response.split("\n\n")) == len(scores)
        # the run picked by the last step's score: the same pick from the exported scores
        best = max(range(4), key=lambda k: row["scores"][k][-1])
        assert results[row["id"]]["steps"] == row["responses"][best].split("\n\n")
    run_script("export_samples.py", "export", str(run), str(stripped), "--budget", "4", "--strip",
               threads=False)
    assert all(json.loads(line)["question"] is None for line in stripped.read_text().splitlines())
    run_script("export_samples.py", "restore", str(stripped), str(restored), "--dataset", "arith",
               "--split", "test", threads=False)
    assert restored.read_text() == samples.read_text()


def test_expert_iteration_smoke_runs_every_stage_and_resumes(tmp_path):
    """Search, export, SFT, validation choice and test measurement at a tiny size; a second run
    finds every stage complete and only rewrites the table."""
    pytest.importorskip("trl")
    out = tmp_path / "ei"
    flags = ["--out", str(out), "--problems", "6", "--rounds", "1", "--lrs", "3e-5", "--eval-limit", "4",
             "--settings", "gold"]  # fmt: skip
    run_script("expert_iteration.py", *flags, timeout=900)
    table = json.loads((out / "table.json").read_text())
    rows = {(r["setting"], r["round"]): r for r in table["rows"]}
    assert set(rows) == {("base", 0), ("gold", 1)}
    assert rows[("gold", 1)]["rows"] > 0 and rows[("gold", 1)]["chosen"] == "gold-r1-lr3e-05"
    assert {"greedy@1", "self_consistency@16", "beam@16"} <= set(rows[("gold", 1)]["test"])
    assert (out / "gold-r1-lr3e-05" / "prmsearch.json").is_file()
    log = (out / "log.txt").read_text()
    run_script("expert_iteration.py", *flags, timeout=300)
    assert (out / "log.txt").read_text() == log  # nothing ran twice
    assert "| gold | 1 |" in (out / "table.md").read_text()


def test_real_model_table_reads_the_stored_rows_and_keeps_partial_cells_out(tmp_path):
    plot = tmp_path / "acc.png"
    proc = run_script("real_model_table.py", "--plot", str(plot), threads=False)
    table = proc.stdout
    # greedy and majority@16 over the stored 100-problem sample: 25 and 31 right
    assert "| greedy | - | 1 | 25 | 17-34 | 25 |" in table
    assert "| self_consistency | - | 16 | 31 |" in table
    assert "voting at its FLOPs" in table
    # a cell with fewer rows than problems is listed apart, with its count, never in the table
    partial = table.split("Partial cells")[1] if "Partial cells" in table else ""
    for line in partial.splitlines():
        if line.startswith("- "):
            assert " of 100 rows, " in line
    assert plot.stat().st_size > 10_000


def test_beam_work_counts_prmsearch_beam_steps_on_the_stand_in_policy():
    proc = run_script("peers_real/beam_work.py", "--lib", "prmsearch", "--problems", "20", threads=False)
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["lib"] == "prmsearch" and row["problems"] == 20
    # budget 16: at least the first round's 16 steps a problem, at most 16 rounds of 16
    assert 16 <= row["steps_per_problem"] <= 16 * 16
    assert 20 * row["steps_per_problem"] <= row["tokens_per_problem"] <= 90 * row["steps_per_problem"]
    assert 1 <= row["chosen_path_steps"] <= 16
    again = run_script("peers_real/beam_work.py", "--lib", "prmsearch", "--problems", "20", threads=False)
    assert json.loads(again.stdout.strip().splitlines()[-1]) == row  # the stand-in policy is seeded


def test_solve_phases_times_each_phase_of_a_search(tmp_path):
    out = tmp_path / "phases.json"
    proc = run_script("solve_phases.py", "--policy", "embedded", "--prm", "embedded", "--problems", "2",
                      "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert {"imports", "load one by one", "search", "close", "total"} <= set(figures)
    assert figures["total"] >= figures["search"] > 0
    assert len(figures["answers"]) == 2 and figures["generated_tokens"] > 0


def test_compare_bench_rows_ignores_wall_time_and_names_what_differs(tmp_path):
    row = {"qid": "q1", "strategy": "beam", "budget": 4, "seed": 0, "answer": "7",
           "ledger": {"flops": 10, "wall_s": 1.5}}
    before, same, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    before.write_text(json.dumps(row) + "\n")
    same.write_text(json.dumps({**row, "ledger": {"flops": 10, "wall_s": 9.0}}) + "\n")
    other.write_text(json.dumps({**row, "answer": "8"}) + "\n")
    script = [sys.executable, str(ROOT / "scripts" / "compare_bench_rows.py")]
    ok = subprocess.run([*script, str(before), str(same)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "1 rows against 1; 0 differ" in ok.stdout
    bad = subprocess.run([*script, str(before), str(other)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "answer differ" in bad.stdout
