"""Sweeps sharded over Ray actors: the same rows as one process, streamed to one writer, resumable."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import synthetic_backends

from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.sweeps.distributed import RayConfig, RayRunner, SweepWorker
from prmsearch.benchmarks.sweeps.sweep import SweepConfig, SweepProblem, run_sweep

PROBLEMS = [SweepProblem(f"p{i}", f"problem {i}", str(i % 4)) for i in range(5)]
CONFIG = SweepConfig(strategies=("greedy", "beam", "best_of_n"), budgets=(1, 4), seeds=(0, 1), chunk=2)
FACTORY = functools.partial(synthetic_backends, depth=2)  # picklable: each actor builds its own


def grade(answer, gold):
    return answer is not None and canonical_answer(answer) == canonical_answer(gold)


def sweep(out, runner=None, **kw):
    policy, scorer = FACTORY()
    return run_sweep(
        CONFIG,
        PROBLEMS,
        out,
        policy=policy,
        scorer=scorer,
        grade=grade,
        matcher=AnswerMatcher(),
        progress=False,
        runner=runner,
        **kw,
    )


def comparable(folder):
    """Rows in key order, ledgers without wall time (which differs between runs)."""
    rows = []
    for row in folder.rows():
        ledger = {k: v for k, v in (row["ledger"] or {}).items() if k != "wall_s"}
        rows.append({**row, "ledger": ledger})
    return sorted(rows, key=lambda r: (r["qid"], r["strategy"], r["budget"], r["seed"]))


def test_importing_prmsearch_does_not_import_ray():
    code = "import sys, prmsearch, prmsearch.benchmarks.sweeps.distributed; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ray_config_validation():
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        RayConfig(workers=0)
    with pytest.raises(ValueError, match="inflight"):
        RayConfig(inflight=0)
    with pytest.raises(ValueError, match="address"):
        RayConfig(address=" ")


def test_worker_rows_equal_in_process_rows(tmp_path):
    """The actor's logic, without Ray: a chunk's rows are the in-process run's rows."""
    expected = comparable(sweep(tmp_path))
    worker = SweepWorker(CONFIG, FACTORY, grade, AnswerMatcher())
    rows = [r for s, b, seed in CONFIG.cells() for r in worker.run(s, b, seed, PROBLEMS)]
    rows = [{**r, "ledger": {k: v for k, v in r["ledger"].items() if k != "wall_s"}} for r in rows]
    assert sorted(rows, key=lambda r: (r["qid"], r["strategy"], r["budget"], r["seed"])) == expected


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    here = Path(__file__).resolve()  # actors import the factories' modules: this one and helpers
    tests = os.pathsep.join([str(here.parent), str(here.parents[1])])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": tests}},
    )
    yield ray
    ray.shutdown()


def test_ray_rows_equal_single_process_rows(tmp_path, ray_cluster):
    expected = comparable(sweep(tmp_path / "local"))
    runner = RayRunner(RayConfig(workers=2), backends=FACTORY)
    folder = sweep(tmp_path / "ray", runner=runner)
    assert comparable(folder) == expected  # answers, correct, steps, scores, ledgers but wall time


def test_ray_resumes_a_partial_run(tmp_path, ray_cluster):
    expected = comparable(sweep(tmp_path / "local"))
    runner = RayRunner(RayConfig(workers=2, inflight=1), backends=FACTORY)
    folder = sweep(tmp_path / "ray", runner=runner)
    lines = folder.results_path.read_text().splitlines(keepends=True)
    folder.results_path.write_text("".join(lines[:9]) + lines[9][:30])  # killed mid-write
    resumed = sweep(tmp_path / "ray", runner=runner, resume=True)
    assert comparable(resumed) == expected  # none lost, none twice


def test_cli_bench_ray_flags_reach_the_runner(tmp_path, monkeypatch):
    import prmsearch.benchmarks.sweeps.sweep as sweep_module
    from prmsearch.benchmarks.sweeps.results import ResultRow, ResultsFolder
    from prmsearch.cli import main

    seen = {}

    def fake_run_sweep(config, problems, out, **kw):  # writes every row (a gap would exit 1)
        seen.update(kw)
        folder = ResultsFolder(out)
        done = folder.open(config.to_dict(), resume=kw["resume"])
        for strategy, budget, seed in config.expected_cells():
            for p in problems:
                if (p.qid, strategy, budget, seed) not in done:
                    folder.append(ResultRow(p.qid, strategy, budget, seed, None, p.gold, False, None))
        return folder

    monkeypatch.setattr(sweep_module, "run_sweep", fake_run_sweep)
    args = ["bench", "--limit", "2", "--strategies", "beam", "--out", str(tmp_path), "--json"]
    assert main([*args, "--ray-address", "auto", "--ray-workers", "3"]) == 0
    runner = seen["runner"]
    assert isinstance(runner, RayRunner) and runner.ray_config == RayConfig(address="auto", workers=3)
    assert seen["policy"] is None and seen["scorer"] is None  # the actors build their own backends
    assert main([*args, "--resume", "--ray"]) == 0 and seen["runner"].ray_config.address is None
    assert main([*args, "--resume"]) == 0 and seen["runner"] is None
    assert main([*args, "--resume", "--ray-workers", "2"]) == 2  # needs --ray or --ray-address


def test_label_on_ray_equals_label_in_process(tmp_path, ray_cluster):
    """``prmsearch label --ray``: actors build the embedded policy themselves and label whole
    chunks; the driver writes the same rows as one process, and a resume adds only what is missing."""
    from prmsearch.arith.problems import load_split
    from prmsearch.cli.prm_kit import label_backends
    from prmsearch.prm.labelling import LabelConfig, LabelProblem, labels_folder, run_labelling

    problems = [LabelProblem(p.id, p.question, str(p.answer)) for p in load_split("train", 5)]
    cfg = LabelConfig(samples=2, rollouts=1, solution_max_tokens=96, chunk=2)
    backends = functools.partial(label_backends, None, None, None, None, False)  # picklable
    local = run_labelling(cfg, problems, tmp_path / "local", backends=backends)
    runner = RayRunner(RayConfig(workers=2, inflight=1))
    on_ray = run_labelling(cfg, problems[:3], tmp_path / "ray", backends=backends, runner=runner)
    assert on_ray["problems"] == 3
    on_ray = run_labelling(cfg, problems, tmp_path / "ray", backends=backends, runner=runner, resume=True)
    assert on_ray == local

    def by_id(name):
        return sorted(labels_folder(tmp_path / name).rows(), key=lambda row: row["id"])

    assert by_id("ray") == by_id("local")


def test_cli_label_ray_flags(tmp_path, ray_cluster, capsys):
    import json

    from prmsearch.cli import main

    # the policy is registered by a plugin file: each actor must import it to build the policy
    plugin = tmp_path / "my_policy.py"
    plugin.write_text("from prmsearch import make_policy, register_policy\n"
                      "register_policy('plugin-arith', lambda **kw: make_policy('arith', **kw),\n"
                      "                replace=True)\n")
    out = tmp_path / "labels"
    args = ["--plugin", str(plugin), "label", "--policy", "plugin-arith", "--split", "train", "--limit", "3",
            "--samples", "1", "--rollouts", "1", "--chunk", "1", "--max-solution-tokens", "96", "--ray",
            "--ray-workers", "2", "--out", str(out), "--json", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["problems"] == 3 and summary["solutions"] == 3
    rows = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(row["provenance"]["policy"] == "plugin-arith" for row in rows)


def test_starting_ray_keeps_the_callers_sigterm_handler():
    """ray.init installs a SIGTERM handler that exits at once; the runner puts the caller's back,
    so a bench stopped by SIGTERM still stops as on Ctrl-C (a stand-in for ray: no cluster)."""
    import signal

    from prmsearch.benchmarks.sweeps.distributed import RayConfig, RayRunner

    class StandInRay:
        def is_initialized(self):
            return False

        def init(self, **kwargs):
            signal.signal(signal.SIGTERM, lambda number, frame: None)  # as ray.init does

    def callers_handler(number, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, callers_handler)
    try:
        assert RayRunner(RayConfig(workers=1))._connect(StandInRay()) is True
        assert signal.getsignal(signal.SIGTERM) is callers_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
