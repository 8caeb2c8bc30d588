"""The accuracy plot tells every series apart: strategies by colour, scorers by marker."""

from __future__ import annotations

import pytest

from prmsearch.benchmarks.analysis.report import plot_accuracy, series_looks

pytest.importorskip("matplotlib")


def test_no_two_series_look_alike_and_a_family_shares_its_colour():
    names = [
        "beam", "beam [0.5B as verifier]", "beam [1.5B as verifier]", "best_of_n",
        "best_of_n [0.5B as verifier]", "dvts", "dvts [1.5B as verifier]", "greedy",
        "particle_filter", "self_consistency", "weighted_vote", "mcts",
    ]
    looks = series_looks(names)
    seen = {(tuple(color), marker) for color, marker, _ in looks.values()}
    assert len(seen) == len(names)
    # eleven-plus strategies: no colour is reused between two strategies
    colours = {name: tuple(looks[name][0]) for name in names if " [" not in name}
    assert len(set(colours.values())) == len(colours)
    assert looks["beam [1.5B as verifier]"][0] == looks["beam"][0]
    assert looks["beam"][1:] == ("o", "-") and looks["beam [1.5B as verifier]"][2] == "--"


def test_plot_is_written(tmp_path):
    summary = {
        "dataset": "toy", "n_problems": 2,
        "runs": [
            {"strategy": "beam", "budget": 4, "accuracy": 0.5, "flops": 1e9},
            {"strategy": "beam", "budget": 16, "accuracy": 1.0, "flops": 4e9},
            {"strategy": "beam [verifier]", "budget": 4, "accuracy": 0.5, "flops": 2e9},
        ],
    }
    path = tmp_path / "plot.png"
    assert plot_accuracy(summary, path) and path.stat().st_size > 1000
