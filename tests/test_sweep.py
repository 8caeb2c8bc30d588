"""Sweeps: rows per (problem, strategy, budget, seed), resume without loss or duplicates,
refusal to mix configurations, and the summary."""

from __future__ import annotations

import json

import pytest
from helpers import synthetic_backends

from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.report import bootstrap_ci, markdown_table, summarize, write_reports
from prmsearch.benchmarks.results import ResultsFolder, ResultsFolderError
from prmsearch.benchmarks.sweep import SweepConfig, SweepProblem, run_sweep

PROBLEMS = [SweepProblem(f"p{i}", f"problem {i}", str(i % 4)) for i in range(5)]
CONFIG = SweepConfig(strategies=("greedy", "beam", "best_of_n"), budgets=(1, 4), seeds=(0, 1))


def grade(answer, gold):
    return answer is not None and canonical_answer(answer) == canonical_answer(gold)


def sweep(tmp_path, config=CONFIG, problems=PROBLEMS, **kw):
    policy, scorer = synthetic_backends(depth=2)
    return run_sweep(
        config,
        problems,
        tmp_path / "out",
        policy=policy,
        scorer=scorer,
        grade=grade,
        matcher=AnswerMatcher(),
        progress=False,
        **kw,
    )


def test_one_row_per_problem_strategy_budget_seed(tmp_path):
    folder = sweep(tmp_path)
    rows = list(folder.rows())
    keys = [(r["qid"], r["strategy"], r["budget"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 5 * (2 + 2 * 2 + 2 * 2)  # greedy only at budget 1
    row = rows[0]
    assert {"qid", "answer", "gold", "correct", "ledger", "steps", "step_scores", "error"} <= set(row)
    assert len(row["steps"]) == len(row["step_scores"])
    manifest = json.loads((folder.path / "manifest.json").read_text())
    assert manifest["config"]["budgets"] == [1, 4] and "prmsearch" in manifest["versions"]


def _comparable(folder):
    """Rows without their ledgers (wall times differ between runs), in key order."""
    rows = [{k: v for k, v in r.items() if k != "ledger"} for r in folder.rows()]
    return sorted(rows, key=lambda r: (r["qid"], r["strategy"], r["budget"], r["seed"]))


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path):
    full = _comparable(sweep(tmp_path / "a"))
    folder = sweep(tmp_path / "b")
    lines = folder.results_path.read_text().splitlines(keepends=True)
    folder.results_path.write_text("".join(lines[:7]) + lines[7][:25])  # killed mid-write
    with pytest.raises(ResultsFolderError, match="--resume"):
        sweep(tmp_path / "b")
    resumed = sweep(tmp_path / "b", resume=True)
    assert _comparable(resumed) == full  # none lost, none twice, same results


def test_resume_refuses_another_configuration(tmp_path):
    sweep(tmp_path)
    other = SweepConfig(strategies=("greedy", "beam", "best_of_n"), budgets=(1, 4, 16), seeds=(0, 1))
    with pytest.raises(ResultsFolderError, match=r"another configuration.*budgets"):
        sweep(tmp_path, config=other, resume=True)


def test_sweep_config_validation():
    with pytest.raises(ValueError, match="known strategy names"):
        SweepConfig(strategies=("beem",))
    with pytest.raises(ValueError, match="budgets must be ints >= 1"):
        SweepConfig(budgets=(0,))
    with pytest.raises(ValueError, match="not in the sweep"):
        SweepConfig(strategies=("beam",), options={"dvts": {"width": 2}})
    assert SweepConfig(strategies=("beam",), budgets=(1, 6)).strategy_options("beam", 6)["width"] == 2


def test_summary_and_reports(tmp_path):
    folder = sweep(tmp_path)
    summary = write_reports(folder.path, list(folder.rows()), "toy", len(PROBLEMS))
    run = next(r for r in summary["runs"] if r["strategy"] == "beam" and r["budget"] == 4)
    assert run["n"] == 5 and 0 <= run["ci95"][0] <= run["accuracy"] <= run["ci95"][1] <= 1
    assert run["generated_tokens"] > 0 and run["flops"] > 0 and run["errors"] == 0
    assert (folder.path / "summary.md").read_text().startswith("Dataset `toy`")
    assert (folder.path / "accuracy.png").stat().st_size > 1000
    assert "| beam | 4 | 0 |" in markdown_table(summary)


def test_accuracy_and_bootstrap_are_right():
    rows = [
        {"strategy": "s", "budget": 1, "seed": 0, "correct": c, "ledger": None}
        for c in [True, True, True, False]
    ]
    (run,) = summarize(rows, "d", 4)["runs"]
    assert run["accuracy"] == 0.75
    import numpy as np

    lo, hi = bootstrap_ci(np.array([1.0, 0.0] * 50))
    assert 0.38 < lo < 0.5 < hi < 0.62


def test_errors_are_recorded_and_the_run_goes_on(tmp_path):
    problems = [*PROBLEMS[:2], SweepProblem("bad", "bad", "1")]
    policy, scorer = synthetic_backends(depth=2)
    original = policy.script

    def script(question, steps, index, seed):
        if question == "bad":
            raise RuntimeError("server returned garbage")
        return original(question, steps, index, seed)

    policy.script = script
    config = SweepConfig(strategies=("beam",), budgets=(4,))
    folder = run_sweep(
        config,
        problems,
        tmp_path,
        policy=policy,
        scorer=scorer,
        grade=grade,
        matcher=AnswerMatcher(),
        progress=False,
    )
    rows = {r["qid"]: r for r in folder.rows()}
    assert "server returned garbage" in rows["bad"]["error"] and rows["bad"]["correct"] is False
    assert rows["p0"]["error"] is None and rows["p1"]["answer"] is not None


def test_results_folder_refuses_rows_without_manifest(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"qid": 1}\n')
    with pytest.raises(ResultsFolderError, match="without manifest"):
        ResultsFolder(tmp_path).open({}, resume=True)


def test_cli_bench_writes_results_and_summary(tmp_path, capsys):
    from prmsearch import register_policy, register_scorer
    from prmsearch.cli import main

    policy, scorer = synthetic_backends(depth=2)
    register_policy("test-bench", lambda **_: policy, replace=True)
    register_scorer("test-bench", lambda **_: scorer, replace=True)
    args = [
        "bench",
        "--dataset",
        "arith",
        "--limit",
        "3",
        "--strategies",
        "greedy,beam",
        "--budgets",
        "1,4",
        "--policy",
        "test-bench",
        "--prm",
        "test-bench",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_problems"] == 3
    assert [(r["strategy"], r["budget"]) for r in summary["runs"]] == [
        ("beam", 1),
        ("beam", 4),
        ("greedy", 1),
    ]
    assert main([*args, "--resume"]) == 0  # nothing left to run: the same summary again
    assert len(list(ResultsFolder(tmp_path).rows())) == 9
