"""The fault campaign, files part: what a long run writes survives damage, and a second writer or
an edited dataset is refused instead of mixing results.

Each case is something that happened on main (issue "Faults, measured"): a damaged middle line of
``results.jsonl`` that stopped a resume with no file or line named, two ``bench`` processes
interleaving rows in one folder, a resume that reused rows after the golds were edited, a corrupt
manifest, a ``label`` resume that printed the whole configuration instead of the change.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import synthetic_backends

from prmsearch import register_policy, register_scorer
from prmsearch.benchmarks.sweeps import folder_lock
from prmsearch.benchmarks.sweeps.results import ResultsFolder, ResultsFolderError
from prmsearch.cli import main

QUESTIONS = [("q1", "What is 2 + 3?", "5"), ("q2", "What is 4 + 4?", "8"), ("q3", "What is 9 - 1?", "8"),
             ("q4", "What is 7 + 2?", "9")]


def _dataset(path: Path, rows=QUESTIONS) -> Path:
    path.write_text("".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n" for i, q, a in rows))
    return path


def _bench(out: Path, data: Path, *flags: str) -> list[str]:
    policy, scorer = synthetic_backends(depth=2)
    register_policy("faults-policy", lambda **_: policy, replace=True)
    register_scorer("faults-prm", lambda **_: scorer, replace=True)
    return ["bench", "--dataset", str(data), "--id-field", "id", "--policy", "faults-policy", "--prm",
            "faults-prm", "--strategies", "greedy,beam", "--budgets", "1,4", "--out", str(out),
            "--no-progress", "--json", *flags]  # fmt: skip


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def _timeless(value):
    """``value`` without its wall-clock fields (the only thing two runs may differ in)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items()
                if not any(t in k for t in ("wall", "seconds", "time"))}
    return value


def _without_times(rows: list[dict]) -> list[dict]:
    return sorted((_timeless(r) for r in rows), key=lambda r: (r["qid"], r["strategy"], r["budget"]))


def _one_line_error(capsys, *named: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for text in named:
        assert text in err, (text, err)
    return err


def test_a_damaged_middle_line_is_named_and_set_aside(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    clean, out = tmp_path / "clean", tmp_path / "run"
    assert main(_bench(clean, data)) == 0
    assert main(_bench(out, data)) == 0
    capsys.readouterr()
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\x07\x00 torn by a disk fault\n"  # a damaged line with rows after it
    (out / "results.jsonl").write_text("".join(lines))

    assert main(_bench(out, data, "--resume")) == 2
    _one_line_error(capsys, "results.jsonl line 3 is damaged", "--resume --set-aside-damaged")
    assert (out / "results.jsonl").read_text() == "".join(lines)  # refused: nothing changed

    assert main(_bench(out, data, "--resume", "--set-aside-damaged")) == 0
    capsys.readouterr()
    side = [json.loads(line) for line in (out / "results.jsonl.damaged").read_text().splitlines()]
    assert [(d["line"], d["why"]) for d in side] == [(3, "damaged")]
    assert "torn by a disk fault" in side[0]["text"]
    assert _without_times(_rows(out)) == _without_times(_rows(clean))  # the lost row was run again


def test_a_torn_last_line_goes_to_the_side_file(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    out = tmp_path / "run"
    assert main(_bench(out, data)) == 0
    text = (out / "results.jsonl").read_text()
    last = text.splitlines(keepends=True)[-1]
    (out / "results.jsonl").write_text(text[: -len(last)] + last[:25])  # killed mid-write
    assert main(_bench(out, data, "--resume")) == 0
    capsys.readouterr()
    side = [json.loads(line) for line in (out / "results.jsonl.damaged").read_text().splitlines()]
    assert side[0]["why"] == "a torn last line" and side[0]["text"] == last[:25]
    assert len(_rows(out)) == len(text.splitlines())


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    out = tmp_path / "run"
    out.mkdir()
    code = ("import sys, time; from prmsearch.benchmarks.sweeps import folder_lock; "
            "folder_lock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(_bench(out, data)) == 2
        _one_line_error(capsys, f"in use by process {holder.pid}", "--out")
        assert not (out / "results.jsonl").exists()  # refused before writing anything
        holder.send_signal(signal.SIGKILL)  # a holder killed outright leaves no stale lock
        holder.wait(timeout=10)
        assert main(_bench(out, data)) == 0
    finally:
        holder.kill()
        holder.wait()


def test_two_bench_processes_on_one_folder_never_interleave(tmp_path):
    """Two real ``prmsearch bench`` processes with different configurations on one --out: exactly
    one writes; the other exits 2 naming the holder, or, if it started after the first ended, is
    refused as another configuration. The rows are one run's, never a mix."""
    data = _dataset(tmp_path / "data.jsonl", [(f"q{i}", f"What is {i} + 1?", str(i + 1)) for i in range(40)])
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "prmsearch.cli", "bench", "--dataset", str(data), "--id-field", "id",
            "--budgets", "1", "--threads", "1", "--out", str(out), "--no-progress"]
    first = subprocess.Popen([*base, "--strategies", "greedy"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / ".lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.run([*base, "--strategies", "greedy", "--temperature", "0.5"], env=env,
                            capture_output=True, text=True, timeout=600)
    _, first_err = first.communicate(timeout=600)
    assert first.returncode == 0, first_err
    assert second.returncode == 2
    assert f"in use by process {first.pid}" in second.stderr or "another configuration" in second.stderr
    rows = _rows(out)
    assert len(rows) == 40 and len({r["qid"] for r in rows}) == 40
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["temperature"] != 0.5


def test_an_edited_dataset_is_refused_naming_the_problem(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    out = tmp_path / "run"
    assert main(_bench(out, data)) == 0
    edited = [(i, q, "99" if i == "q2" else a) for i, q, a in QUESTIONS]
    _dataset(data, edited)  # same path, another gold
    capsys.readouterr()
    assert main(_bench(out, data, "--resume")) == 2
    _one_line_error(capsys, "problem 'q2'", "changed since")
    _dataset(data)  # restored: the resume goes on
    assert main(_bench(out, data, "--resume")) == 0


def test_a_folder_from_before_digests_takes_them_on(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    out = tmp_path / "run"
    assert main(_bench(out, data)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["problems"]  # as folders written before this check have it
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(_bench(out, data, "--resume")) == 0
    assert set(json.loads((out / "manifest.json").read_text())["problems"]) == {"q1", "q2", "q3", "q4"}


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", "\udcff"])
def test_a_damaged_manifest_is_named(tmp_path, capsys, damage):
    data = _dataset(tmp_path / "data.jsonl")
    out = tmp_path / "run"
    assert main(_bench(out, data)) == 0
    (out / "manifest.json").write_bytes(damage.encode("utf-8", "surrogateescape"))
    capsys.readouterr()
    assert main(_bench(out, data, "--resume")) == 2
    _one_line_error(capsys, "manifest.json is damaged")


def test_label_resume_names_the_setting_that_changed(tmp_path, capsys):
    out = tmp_path / "labels"
    base = ["label", "--split", "train", "--limit", "2", "--rollouts", "1", "--max-solution-tokens", "48",
            "--threads", "1", "--out", str(out), "--no-progress"]
    assert main([*base, "--samples", "2"]) == 0
    capsys.readouterr()
    assert main([*base, "--samples", "1", "--resume"]) == 2
    err = _one_line_error(capsys, "label.samples: 2 -> 1")
    assert "provenance" not in err  # the unchanged parts are not dumped


def test_a_damaged_labels_line_is_named_and_set_aside(tmp_path, capsys):
    out = tmp_path / "labels"
    base = ["label", "--split", "train", "--limit", "3", "--samples", "1", "--rollouts", "1",
            "--max-solution-tokens", "48", "--threads", "1", "--out", str(out), "--no-progress", "--json"]
    assert main(base) == 0
    first = json.loads(capsys.readouterr().out)
    lines = (out / "labels.jsonl").read_text().splitlines(keepends=True)
    lines[1] = "\x00\x00\x00\n"
    (out / "labels.jsonl").write_text("".join(lines))
    assert main([*base, "--resume"]) == 2
    _one_line_error(capsys, "labels.jsonl line 2 is damaged", "--set-aside-damaged")
    assert main([*base, "--resume", "--set-aside-damaged"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["solutions"] == first["solutions"] == 3
    assert (out / "labels.jsonl.damaged").exists()


def test_a_folder_that_cannot_be_written_is_a_clear_error(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    if os.geteuid() == 0:  # root writes through permission bits; /sys refuses everyone
        out = Path("/sys/prmsearch-fault-test")
    else:
        out = tmp_path / "ro"
        out.mkdir()
        out.chmod(0o500)
    try:
        assert main(_bench(out, data)) == 2
        _one_line_error(capsys, "--out", "write to")
    finally:
        if out.parent == tmp_path:
            out.chmod(0o700)


def test_a_full_disk_stops_cleanly_and_the_run_resumes(tmp_path):
    """A real ``prmsearch bench`` process whose file writes fail past a size (RLIMIT_FSIZE, the
    kernel's "file too large", as a full disk fails a write): it stops with one clear line and
    exit 2, the half-written row is set aside on the next resume, and the rows then equal an
    uninterrupted run's."""
    import resource

    data = _dataset(tmp_path / "data.jsonl")
    clean, out = tmp_path / "clean", tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    bench = [sys.executable, "-m", "prmsearch.cli", "bench", "--dataset", str(data), "--id-field", "id",
             "--strategies", "greedy,beam", "--budgets", "1,2", "--threads", "1", "--no-progress"]
    for folder in (clean, out):
        subprocess.run([*bench, "--out", str(folder)], env=env, check=True, capture_output=True, timeout=600)
    kept = (out / "results.jsonl").read_text().splitlines(keepends=True)[:3]
    (out / "results.jsonl").write_text("".join(kept))
    limit = (out / "results.jsonl").stat().st_size + 200  # room for part of one more row

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = subprocess.run([*bench, "--out", str(out), "--resume"], env=env, capture_output=True, text=True,
                          timeout=600, preexec_fn=small_disk)
    assert full.returncode == 2, full.stderr
    assert "Traceback" not in full.stderr and "cannot write to" in full.stderr and "--resume" in full.stderr
    subprocess.run([*bench, "--out", str(out), "--resume"], env=env, check=True, capture_output=True,
                   timeout=600)
    assert _without_times(_rows(out)) == _without_times(_rows(clean))
    side = (out / "results.jsonl.damaged").read_text().splitlines()
    assert [json.loads(line)["why"] for line in side] == ["a torn last line"]


def test_a_results_file_that_is_not_a_file_is_refused(tmp_path, capsys):
    data = _dataset(tmp_path / "data.jsonl")
    out = tmp_path / "run"
    assert main(_bench(out, data)) == 0
    (out / "results.jsonl").unlink()
    (out / "results.jsonl").symlink_to("/dev/zero")  # reading it would never end
    capsys.readouterr()
    assert main(_bench(out, data, "--resume")) == 2
    _one_line_error(capsys, "results.jsonl is not a regular file")


def test_the_lock_is_counted_within_one_process(tmp_path):
    """Two holders in one process share the lock; only the last release frees it for others."""
    first = ResultsFolder(tmp_path)
    first.open({"c": 1}, resume=False)
    second = ResultsFolder(tmp_path)
    second.open({"c": 1}, resume=True)
    second.close()
    code = "import sys; from prmsearch.benchmarks.sweeps import folder_lock; folder_lock.acquire(sys.argv[1])"
    other = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert other.returncode != 0 and "in use by process" in other.stderr
    first.close()
    assert subprocess.run([sys.executable, "-c", code, str(tmp_path)]).returncode == 0
    with pytest.raises(ResultsFolderError, match="another configuration"):
        ResultsFolder(tmp_path).open({"c": 2}, resume=True)
    assert Path(tmp_path).resolve() not in folder_lock._HELD  # a refused open releases the lock


def test_ctrl_c_says_how_to_resume_and_loses_nothing(tmp_path):
    """SIGINT (Ctrl-C) to a real ``bench`` mid-run: exit 130, one line saying how to resume, no
    traceback; the resume then completes the run with every row once."""
    data = _dataset(tmp_path / "data.jsonl", [(f"q{i}", f"What is {i} + 1?", str(i + 1)) for i in range(60)])
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    bench = [sys.executable, "-m", "prmsearch.cli", "bench", "--dataset", str(data), "--id-field", "id",
             "--strategies", "greedy", "--budgets", "1", "--threads", "1", "--chunk", "1", "--out", str(out),
             "--no-progress"]
    run = subprocess.Popen(bench, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (
            (out / "results.jsonl").exists() and (out / "results.jsonl").stat().st_size > 0):
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=300)
    if run.returncode == 0:
        pytest.skip("the run finished before the interrupt arrived")
    assert run.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err and f"--resume --out {out}" in err
    subprocess.run([*bench, "--resume"], env=env, check=True, capture_output=True, timeout=600)
    rows = _rows(out)
    assert len(rows) == 60 and len({r["qid"] for r in rows}) == 60
