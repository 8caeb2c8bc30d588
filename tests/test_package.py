"""Packaging contracts: a light import, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import synthetic_backends

from prmsearch import register_policy, register_scorer
from prmsearch.cli import main


def test_import_does_not_load_heavy_engines():
    code = (
        "import sys, prmsearch; "
        "print([m for m in ('torch', 'transformers', 'vllm', 'sglang') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_lists_strategies(capsys):
    assert main(["strategies", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in rows]
    assert {
        "beam",
        "best_of_n",
        "dvts",
        "mcts",
        "particle_filter",
        "self_consistency",
        "weighted_vote",
        "rebase",
    } <= set(names)
    beam = next(r for r in rows if r["name"] == "beam")
    assert ["width", 4] in [option[:2] for option in beam["options"]]
    assert {"adaptive_vote", "confidence_vote", "planner"} <= set(names)


@pytest.fixture
def synthetic_registered():
    policy, scorer = synthetic_backends(depth=2)
    register_policy("test-synthetic", lambda **_: policy, replace=True)
    register_scorer("test-synthetic", lambda **_: scorer, replace=True)


def test_cli_solve_json(capsys, synthetic_registered):
    code = main(
        [
            "solve",
            "q",
            "--policy",
            "test-synthetic",
            "--prm",
            "test-synthetic",
            "--strategy",
            "beam",
            "--n",
            "4",
            "-o",
            "width=2",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert {"answer", "steps", "step_scores", "ledger"} <= set(data)
    assert len(data["steps"]) == len(data["step_scores"]) == 3


def test_cli_reports_bad_options(capsys, synthetic_registered):
    assert (
        main(["solve", "q", "--strategy", "nope", "--policy", "test-synthetic", "--prm", "test-synthetic"])
        == 2
    )
    assert "known strategy names" in capsys.readouterr().err


def test_questions_outside_the_embedded_domain_get_a_note():
    from prmsearch import Searcher
    from prmsearch.arith.defaults import domain_note

    assert domain_note("Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?") is None
    assert domain_note("Start with 3. Add 4. Multiply by 2. What is the result?")  # 2 operations: untrained
    assert "outside that domain" in domain_note("Prove that there are infinitely many primes.")
    policy, scorer = synthetic_backends(depth=2)
    result = Searcher(policy, scorer, "beam", n=4, annotate=domain_note)("What is love?")
    assert result.answer is not None and "outside that domain" in result.notes[0]


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_blank_questions_are_refused_up_front(blank):
    from prmsearch import Searcher, solve
    from prmsearch.benchmarks.sweeps.sweep import SweepProblem

    policy, scorer = synthetic_backends(depth=2)
    searcher = Searcher(policy, scorer, "beam", n=4)
    with pytest.raises(ValueError, match=r"question 1 is (empty|blank)"):
        searcher.run(["What is 2+3?", blank])
    assert policy.calls == []  # refused before any search
    with pytest.raises(ValueError, match=r"question 0 is (empty|blank)"):
        solve(blank, policy, scorer, n=4)
    with pytest.raises(ValueError, match=r"SweepProblem.question must be a non-empty string"):
        SweepProblem("p0", blank, "1")


def test_backend_names_that_cannot_load_are_clear_errors():
    from prmsearch.api import MissingModelError, resolve_policy, resolve_scorer

    with pytest.raises(ValueError, match=r"neither a registered policy name .* nor an existing model folder"):
        resolve_policy("/no/such/folder")
    with pytest.raises(MissingModelError, match=r"needs a model"):
        resolve_policy("hf")
    with pytest.raises(MissingModelError, match=r"scorer 'qwen-prm' needs a model"):
        resolve_scorer("qwen-prm")
