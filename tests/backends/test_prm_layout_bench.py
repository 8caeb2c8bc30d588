"""The packed-vs-padded and shared-prefix PRM benchmark on a tiny real Qwen2 PRM: same scores."""

from __future__ import annotations

import json

import pytest

from benchmarks.prm_layout import LayoutBenchConfig, figure_lines, run_layout_bench


def _write_rows(path, problems: int = 3) -> None:
    with path.open("w") as f:
        for p in range(problems):
            responses = [f"Step one of {p}.\n\nStep {k} adds {k}.\n\nSo \\boxed{{{k}}}"
                         for k in range(4)] + ["Short.\n\n\\boxed{1}"]
            f.write(json.dumps({"id": f"p{p}", "question": f"What is {p} + {p}?",
                                "answer": str(2 * p), "responses": responses}) + "\n")


def test_packed_and_padded_compute_the_same_tokens_and_scores(tmp_path, qwen_prm_dir):
    samples = tmp_path / "rows.jsonl"
    _write_rows(samples)
    cfg = LayoutBenchConfig(samples, str(qwen_prm_dir), "qwen-prm", problems=3,
                            prm_args={"device": "cpu", "dtype": "float32"})
    whole, steps, shared = run_layout_bench(cfg)
    assert (whole.workload, steps.workload, shared.workload) == ("whole", "steps", "shared")
    assert whole.tokens["packed"] == whole.tokens["padded"] == whole.tokens["one-by-one"] > 0
    assert steps.tokens["packed"] == steps.tokens["padded"] > 0
    assert steps.tokens["packed"] <= whole.tokens["packed"]  # prefixes came from the cache
    assert whole.max_score_diff < 1e-5 and steps.max_score_diff < 1e-5
    # five solutions a problem: the question and system prompt they share run once, not five times
    assert 0 < shared.tokens["shared"] < shared.tokens["not shared"] == whole.tokens["packed"]
    assert shared.max_score_diff < 1e-5
    lines = figure_lines([whole, steps, shared])
    assert any("packed / padded" in line for line in lines)
    assert any("time not shared / shared" in line for line in lines)


def test_missing_samples_file_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"export_samples\.py restore"):
        LayoutBenchConfig(tmp_path / "none.jsonl", "x", "qwen-prm")


def test_unknown_workload_is_named(tmp_path):
    samples = tmp_path / "rows.jsonl"
    _write_rows(samples, problems=1)
    with pytest.raises(ValueError, match="workloads must be some of whole, steps, shared"):
        LayoutBenchConfig(samples, "x", "qwen-prm", workloads=("whole", "padded"))
