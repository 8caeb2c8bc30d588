"""Accuracy at equal compute: exact log-FLOPs interpolation, no extrapolation, one-budget strategies."""

from __future__ import annotations

import math

import pytest

from prmsearch.benchmarks.analysis.equal_compute import (
    CurvePoint,
    choose_reference,
    equal_compute,
    interpolate,
    markdown_section,
    markdown_table,
    strategy_curves,
)
from prmsearch.benchmarks.analysis.report import write_reports


def run(strategy: str, budget: int, flops: float, accuracy: float, seed: int = 0) -> dict:
    return {"strategy": strategy, "budget": budget, "seed": seed, "accuracy": accuracy, "flops": flops}


def summary(*runs: dict) -> dict:
    return {"dataset": "toy", "n_problems": 10, "runs": list(runs)}


#: best_of_n at 1e8 / 4e8 / 1.6e9 FLOPs; beam measured between 2e8 and 8e8; greedy at 1e8 only.
HAND_MADE = summary(
    run("best_of_n", 1, 1e8, 0.40),
    run("best_of_n", 4, 4e8, 0.50),
    run("best_of_n", 16, 1.6e9, 0.60),
    run("beam", 1, 2e8, 0.30),
    run("beam", 4, 8e8, 0.50),
    run("greedy", 1, 1e8, 0.70),
    run("mcts", 4, 3e8, 0.90),
)


def test_levels_are_the_reference_budgets_flops():
    result = equal_compute(HAND_MADE)
    assert result.reference == "best_of_n"
    assert [(lv.budget, lv.flops) for lv in result.levels] == [(1, 1e8), (4, 4e8), (16, 1.6e9)]
    assert result.accuracy["best_of_n"] == (0.40, 0.50, 0.60)
    assert list(result.accuracy) == ["best_of_n", "beam", "greedy", "mcts"]  # reference, then by name


def test_interpolation_is_linear_in_log_flops():
    # 4e8 is the geometric midpoint of 2e8 and 8e8: halfway between 0.30 and 0.50
    beam = equal_compute(HAND_MADE).accuracy["beam"]
    assert beam[1] == pytest.approx(0.40, abs=1e-12)
    points = [CurvePoint(1, 1e8, 0.2), CurvePoint(4, 1e10, 0.6)]
    # log10 FLOPs goes 8 -> 10: 1e9 is halfway, 10**8.5 a quarter of the way
    assert interpolate(points, 1e9) == pytest.approx(0.4, abs=1e-12)
    assert interpolate(points, 10 ** 8.5) == pytest.approx(0.3, abs=1e-12)
    assert interpolate(points, 1e8) == 0.2 and interpolate(points, 1e10) == 0.6


def test_no_extrapolation_outside_the_measured_range():
    beam = equal_compute(HAND_MADE).accuracy["beam"]
    assert beam[0] is None  # 1e8 < beam's lowest 2e8
    assert beam[2] is None  # 1.6e9 > beam's highest 8e8
    points = [CurvePoint(1, 1e8, 0.2), CurvePoint(4, 1e10, 0.6)]
    assert interpolate(points, 0.99e8) is None
    assert interpolate(points, 1.01e10) is None
    assert interpolate([], 1e9) is None


def test_one_budget_strategy_has_a_value_only_at_its_own_flops():
    result = equal_compute(HAND_MADE)
    assert result.accuracy["greedy"] == (0.70, None, None)  # measured exactly at level 0
    assert result.accuracy["mcts"] == (None, None, None)  # 3e8 matches no level
    assert interpolate([CurvePoint(1, 3e8, 0.9)], 3e8 * (1 + 1e-12)) == 0.9  # float noise only
    assert interpolate([CurvePoint(1, 3e8, 0.9)], 3.001e8) is None


def test_seeds_are_averaged_and_runs_without_flops_dropped():
    s = summary(
        run("best_of_n", 1, 1e8, 0.4, seed=0),
        run("best_of_n", 1, 3e8, 0.6, seed=1),
        run("beam", 1, float("nan"), 0.9),
    )
    curves = strategy_curves(s)
    assert list(curves) == ["best_of_n"]
    (point,) = curves["best_of_n"]
    assert point.budget == 1 and point.flops == pytest.approx(2e8) and point.accuracy == pytest.approx(0.5)


def test_reference_falls_back_to_the_strategy_with_most_budgets():
    s = summary(run("beam", 1, 1e8, 0.3), run("beam", 4, 4e8, 0.5), run("greedy", 1, 1e8, 0.6))
    assert choose_reference(strategy_curves(s)) == "beam"
    assert equal_compute(s).reference == "beam"
    assert equal_compute(s, reference="greedy").accuracy["beam"] == (0.3,)
    with pytest.raises(ValueError, match="reference strategy 'mcts'"):
        equal_compute(s, reference="mcts")
    with pytest.raises(ValueError, match="no run with a FLOPs figure"):
        equal_compute(summary(run("beam", 1, float("nan"), 0.3)))


def test_best_other_strategy_at_a_level():
    result = equal_compute(HAND_MADE)
    assert result.best_other(0) == ("greedy", 0.70)
    name, acc = result.best_other(1)
    assert name == "beam" and math.isclose(acc, 0.40)
    assert result.best_other(2) is None


def test_markdown_table_names_levels_and_marks_gaps():
    table = markdown_table(equal_compute(HAND_MADE))
    lines = table.splitlines()
    assert lines[0] == (
        "| strategy | best_of_n n=1 (1e+08 FLOPs) | best_of_n n=4 (4e+08 FLOPs) | "
        "best_of_n n=16 (1.6e+09 FLOPs) |"
    )
    assert "| best_of_n | 40.0% | 50.0% | 60.0% |" in lines
    assert "| beam | - | 40.0% | - |" in lines
    assert "| greedy | 70.0% | - | - |" in lines
    section = markdown_section(HAND_MADE)
    assert section.startswith("\n## Accuracy at equal compute")
    assert "Measured FLOPs match no level: mcts (3e+08 FLOPs)." in section
    assert markdown_section(summary(run("beam", 1, float("nan"), 0.3))) == ""


def test_bench_summary_md_shows_accuracy_at_equal_compute(tmp_path):
    def row(strategy, budget, flops, correct):
        ledger = {"generated_tokens": 10, "prm_tokens_computed": 5, "flops": flops, "wall_s": 0.1}
        return {"strategy": strategy, "budget": budget, "seed": 0, "correct": correct, "ledger": ledger}

    rows = [row("best_of_n", 1, 1e8, True), row("best_of_n", 4, 4e8, False),
            row("beam", 1, 2e8, True), row("beam", 4, 4e8, True)]
    write_reports(tmp_path, rows, "toy", 1)
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith("Dataset `toy`")
    assert "## Accuracy at equal compute" in text
    assert "| beam | - | 100.0% |" in text


def test_perf_has_one_equal_compute_row_per_level_with_a_comparison():
    from benchmarks.suite import equal_compute_rows

    rows = equal_compute_rows(equal_compute(HAND_MADE), "toy")
    # levels 1e8 (greedy 0.70 at its own FLOPs), 4e8 (mcts cannot reach: measured at 3e8 only;
    # beam interpolated at 4e8 = 0.40 + 0.5 * 0.20) and 1.6e9 (no other strategy reaches it)
    assert [r.prmsearch for r in rows] == ["greedy 70.0%", "beam 40.0%"]
    assert [round(r.value, 6) for r in rows] == [0.3, -0.1]
