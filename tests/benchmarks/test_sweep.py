"""Sweeps: rows per (problem, strategy, budget, seed), resume without loss or duplicates,
refusal to mix configurations, and the summary."""

from __future__ import annotations

import json

import pytest
from helpers import synthetic_backends

from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.analysis.report import bootstrap_ci, markdown_table, summarize, write_reports
from prmsearch.benchmarks.sweeps.results import ResultsFolder, ResultsFolderError
from prmsearch.benchmarks.sweeps.sweep import SweepConfig, SweepProblem, run_sweep

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


# --- a single budget with the best-of-N family (share_bon_samples on) ---


@pytest.mark.parametrize(
    "strategies",
    [
        ("best_of_n", "beam"),  # one family member: nothing to derive
        ("self_consistency", "best_of_n", "weighted_vote"),  # siblings: derived at the one budget
        ("greedy", "weighted_vote", "beam"),
    ],
)
@pytest.mark.parametrize("budget", [1, 4])
def test_single_budget_sweeps_with_the_bon_family(tmp_path, strategies, budget):
    config = SweepConfig(strategies=strategies, budgets=(budget,), share_bon_samples=True)
    folder = sweep(tmp_path, config)
    keys = [(r["qid"], r["strategy"], r["budget"], r["seed"]) for r in folder.rows()]
    expected = {(p.qid, *cell) for p in PROBLEMS for cell in config.expected_cells()}
    assert len(keys) == len(set(keys)) and set(keys) == expected


def bench_args(out, name, policy, scorer, *flags):
    """``prmsearch bench`` arguments over ``policy`` and ``scorer``, registered as ``name``."""
    from prmsearch import register_policy, register_scorer

    register_policy(name, lambda **_: policy, replace=True)
    register_scorer(name, lambda **_: scorer, replace=True)
    return ["bench", "--out", str(out), "--policy", name, "--prm", name, "--no-progress", *flags]


def test_cli_bench_with_one_budget_and_best_of_n(tmp_path, capsys):
    from prmsearch.cli import main

    flags = ["--strategies", "best_of_n,beam", "--budgets", "4", "--limit", "3", "--json"]
    assert main(bench_args(tmp_path, "test-one-budget", *synthetic_backends(depth=2), *flags)) == 0
    summary = json.loads(capsys.readouterr().out)
    runs = [(r["strategy"], r["budget"], r["n"]) for r in summary["runs"]]
    assert runs == [("beam", 4, 3), ("best_of_n", 4, 3)] and summary["missing"] == []


# --- --retry-errors: rows that ended in an error are run again and replaced ---


def flaky_backends(broken: set[str]):
    """Synthetic backends whose policy fails (like a server outage) for the questions in ``broken``;
    empty the set to bring the "server" back."""
    policy, scorer = synthetic_backends(depth=2)
    original = policy.script

    def script(question, steps, index, seed):
        if question in broken:
            raise RuntimeError("HTTP 503 from the policy server")
        return original(question, steps, index, seed)

    policy.script = script
    return policy, scorer


RETRY_CONFIG = SweepConfig(strategies=("greedy", "beam", "best_of_n", "weighted_vote"), budgets=(2, 4),
                           share_bon_samples=True, chunk=2)  # fmt: skip


def test_retry_errors_replaces_errored_rows_once(tmp_path):
    broken = {"problem 1", "problem 3"}
    policy, scorer = flaky_backends(broken)
    run = dict(policy=policy, scorer=scorer, grade=grade, matcher=AnswerMatcher(), progress=False)
    folder = run_sweep(RETRY_CONFIG, PROBLEMS, tmp_path / "out", **run)
    assert {r["qid"] for r in folder.rows() if r["error"]} == {"p1", "p3"}
    before = folder.results_path.read_text()
    run_sweep(RETRY_CONFIG, PROBLEMS, tmp_path / "out", resume=True, **run)
    assert folder.results_path.read_text() == before  # a plain resume never re-runs an error

    broken.clear()  # the server is back
    folder = run_sweep(RETRY_CONFIG, PROBLEMS, tmp_path / "out", resume=True, retry_errors=True, **run)
    lines = [json.loads(line) for line in folder.results_path.read_text().splitlines()]
    keys = [(r["qid"], r["strategy"], r["budget"], r["seed"]) for r in lines]
    assert len(keys) == len(set(keys))  # replaced, never duplicated, on disk too
    assert not any(r["error"] for r in lines)
    clean = sweep(tmp_path / "clean", RETRY_CONFIG)
    assert _comparable(folder) == _comparable(clean)  # the same rows as a run without the outage


def test_retry_errors_needs_resume(tmp_path):
    with pytest.raises(ValueError, match="needs resume=True"):
        sweep(tmp_path, retry_errors=True)


def _row(qid, error=None):
    from prmsearch.benchmarks.sweeps.results import ResultRow

    return ResultRow(qid, "beam", 4, 0, None if error else "1", "1", error is None, None, error=error)


def test_a_replacement_killed_before_compaction_counts_once(tmp_path):
    """Kill after the new row is appended but before the rewrite: the last row for a key wins."""
    folder = ResultsFolder(tmp_path)
    folder.open({"c": 1}, resume=False)
    for row in (_row("a", error="ServerError: down"), _row("b"), _row("a")):
        folder.append(row)
    (tmp_path / "results.jsonl.tmp").write_text('{"torn": ')  # and a rewrite killed half-way
    rows = list(folder.rows())
    assert [(r["qid"], r["error"]) for r in rows] == [("b", None), ("a", None)] and not folder.error_keys()
    assert ResultsFolder(tmp_path).open({"c": 1}, resume=True) == {("a", "beam", 4, 0), ("b", "beam", 4, 0)}
    assert len(folder.results_path.read_text().splitlines()) == 2  # the resume compacted the file


def test_the_manifest_records_each_machine_and_a_resume_elsewhere_warns(tmp_path, monkeypatch):
    """Rows of two machines differ for the same seeds (a CPU's bf16 decides the vLLM dtype): a
    resume on another machine is recorded and named, and its rows are still resumed."""
    import warnings

    from prmsearch.benchmarks.sweeps.machine import DECISIVE_ENV
    from prmsearch.benchmarks.sweeps.results import MachineChangedWarning

    for key in DECISIVE_ENV:  # CI and other tests set some of these: start from none
        monkeypatch.delenv(key, raising=False)
    folder = ResultsFolder(tmp_path)
    folder.open({"c": 1}, resume=False)
    folder.append(_row("a"))
    folder.close()
    manifest = json.loads(folder.manifest_path.read_text())
    (first,) = manifest["machines"]
    assert first["cores"] and first["cpu"] and isinstance(first["cpu_flags"], list)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same machine: no warning, no second record
        same = ResultsFolder(tmp_path)
        same.open({"c": 1}, resume=True)
        same.close()
    assert len(json.loads(folder.manifest_path.read_text())["machines"]) == 1
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # another engine setting: another machine
    again = ResultsFolder(tmp_path)
    with pytest.warns(MachineChangedWarning, match=r"another machine \(env differ"):
        assert again.open({"c": 1}, resume=True) == {("a", "beam", 4, 0)}
    again.close()
    machines = json.loads(folder.manifest_path.read_text())["machines"]
    assert [m["env"] for m in machines] == [{}, {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}]


def test_cli_bench_retry_errors(tmp_path, capsys):
    from prmsearch.benchmarks.datasets import load_dataset
    from prmsearch.cli import main

    broken = {load_dataset("arith", limit=3)[1].question}
    flags = ["--strategies", "beam", "--budgets", "4", "--limit", "3", "--json"]
    args = bench_args(tmp_path, "test-flaky", *flaky_backends(broken), *flags)
    assert main(args) == 0  # every problem has its row; one of them is an error
    assert json.loads(capsys.readouterr().out)["runs"][0]["errors"] == 1
    broken.clear()
    assert main([*args, "--resume", "--retry-errors"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["errors"] == 0
    assert len(ResultsFolder(tmp_path).results_path.read_text().splitlines()) == 3


# --- gaps: every problem of every cell must end with a row ---


def test_summary_counts_rows_against_problems():
    rows = [{"qid": "p0", "strategy": "beam", "budget": 4, "seed": 0, "correct": True, "ledger": None}]
    cells = [("beam", 4, 0), ("beam", 4, 1)]
    summary = summarize(rows, "toy", 2, cells)
    assert summary["missing"] == [
        {"strategy": "beam", "budget": 4, "seed": 0, "rows": 1, "missing": 1},
        {"strategy": "beam", "budget": 4, "seed": 1, "rows": 0, "missing": 2},
    ]
    note = "**Incomplete**: 3 rows missing: beam n=4 seed 0: 1 of 2 rows (1 missing)"
    assert note in markdown_table(summary)
    assert summarize(rows, "toy", 1, cells[:1])["missing"] == []


def test_cli_bench_exits_non_zero_on_a_gap(tmp_path, capsys, monkeypatch):
    import prmsearch.benchmarks.sweeps.sweep as sweep_module
    from prmsearch.cli import main

    real_run_sweep = sweep_module.run_sweep

    def lossy_run_sweep(config, problems, out, **kw):  # loses the last problem's rows
        return real_run_sweep(config, problems[:-1], out, **kw)

    monkeypatch.setattr(sweep_module, "run_sweep", lossy_run_sweep)
    flags = ["--strategies", "greedy,beam", "--budgets", "4", "--limit", "3"]
    assert main(bench_args(tmp_path, "test-gap", *synthetic_backends(depth=2), *flags)) == 1
    err = capsys.readouterr().err
    assert "incomplete: 2 rows missing: greedy n=1 seed 0: 2 of 3 rows (1 missing); beam n=4 seed 0" in err
    assert "Traceback" not in err


def test_verifier_figures_show_top1_false_positives():
    from prmsearch.benchmarks.analysis.report import verifier_figures, verifier_table

    def row(gold, *candidates):
        return {"gold": gold, "candidates": [{"answer": a, "score": s} for a, s in candidates]}

    exact = lambda a, g: a == g  # noqa: E731
    group = [
        row("1", ("1", 0.9), ("2", 0.5)),  # right on top
        row("1", ("2", 0.95), ("1", 0.9)),  # a wrong one scores a hair higher: a false positive
        row("1", ("3", 0.9), ("2", 0.1)),  # no right candidate: not counted
        row("1", ("1", None), ("2", None)),  # unscored
    ]
    figures = verifier_figures(group, exact)
    assert figures["pass_at_n"] == 3 / 4 and figures["top1_false_positive"] == 1 / 2
    assert verifier_figures([row("1", ("1", None))], exact)["top1_false_positive"] is None  # PRM-free
    summary = {"runs": [{"strategy": "beam", "budget": 4, "accuracy": 0.5, **figures}]}
    assert "| beam | 50 / 75 / 50 |" in verifier_table(summary)


def test_overlapped_sweep_writes_the_same_rows_and_resumes_across_modes(tmp_path):
    import dataclasses

    lock = _comparable(sweep(tmp_path / "a"))
    overlapped = dataclasses.replace(CONFIG, overlap=3)
    assert _comparable(sweep(tmp_path / "b", config=overlapped)) == lock
    flowing = dataclasses.replace(CONFIG, schedule="async")
    assert _comparable(sweep(tmp_path / "d", config=flowing)) == lock
    folder = sweep(tmp_path / "c", config=overlapped)
    lines = folder.results_path.read_text().splitlines(keepends=True)
    folder.results_path.write_text("".join(lines[:9]))  # killed; resumed in lock step
    assert _comparable(sweep(tmp_path / "c", resume=True)) == lock
    manifest = json.loads((folder.path / "manifest.json").read_text())["config"]
    assert "overlap" not in manifest and "schedule" not in manifest
    with pytest.raises(ValueError, match="overlap must be"):
        SweepConfig(overlap=0)
    with pytest.raises(ValueError, match="schedule must be one of"):
        SweepConfig(schedule="soon")
