"""What a new user meets first with a real model: no PRM loaded for greedy, missing scores shown
as ``-``, a model stuck in a loop stopped, GSM8K's train split, and model-free scorers in recipes."""

from __future__ import annotations

import os

import pytest
from helpers import run_one

from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.base import NoScorer, ScoreRequest
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import make_strategy

Q = "Start with 7. Add 5. Multiply by 3. Subtract 6. What is the result?"


def test_greedy_solve_loads_no_prm_and_prints_dashes(capsys, monkeypatch):
    import prmsearch.cli.backends as backends
    from prmsearch.cli import main

    def no_scorer(*args, **kwargs):
        raise AssertionError("greedy must not load a PRM")

    monkeypatch.setattr(backends, "load_scorer", no_scorer)
    assert main(["solve", Q, "--strategy", "greedy"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[1] (-) ") and "(nan)" not in out and "answer: 30" in out


def test_the_api_builds_no_scorer_for_a_strategy_that_reads_none():
    from prmsearch.api import solve

    result = solve(Q, strategy="self_consistency", n=2)
    assert result.ledger.prm_calls == 0 and result.answer is not None


def test_no_scorer_refuses_to_score_and_names_the_fix():
    assert NoScorer().score([]) == []
    with pytest.raises(RuntimeError, match=r"without a PRM .* give a scorer"):
        NoScorer().score([ScoreRequest("q", ("a",))])


def test_a_path_that_repeats_its_recent_step_ends_truncated():
    step = "We add 2 and 3."
    loop = ScriptedPolicy({(): [step], (step,): [step], (step, step): [step], (step,) * 3: [step]})
    result, _ = run_one(loop, ScriptedScorer(lambda q, steps: 0.5),
                             make_strategy("beam", n=1, width=1), max_depth=30)
    tree = result.tree
    assert len(tree) == 4  # the root, the step and two repeats: the loop ended at its second repeat
    assert tree.step_text[3] == tree.step_text[1] and tree.terminal[3] and tree.truncated[3]
    assert not tree.terminal[2]  # one repeat alone goes on
    assert result.answer is None


def test_gsm8k_has_its_train_split_with_ids_of_its_own():
    from prmsearch.benchmarks.datasets import default_data_dir, load_dataset

    if default_data_dir() is None or not (default_data_dir() / "gsm8k_train.jsonl").is_file():
        pytest.skip("../shared/data/gsm8k_train.jsonl is absent")
    train = load_dataset("gsm8k", split="train", limit=3)
    test = load_dataset("gsm8k", limit=3)
    assert [p.id for p in train] == ["gsm8k-train/0", "gsm8k-train/1", "gsm8k-train/2"]
    assert train[0].answer == "72" and test[0].id == "gsm8k/0"
    with pytest.raises(ValueError, match=r"'test', 'train' split"):
        load_dataset("gsm8k", split="validation")


def test_a_recipe_takes_policy_confidence_without_a_model():
    from prmsearch.benchmarks.sweeps.recipes import parse_recipe
    from prmsearch.scorers.confidence import PolicyLogprobScorer

    recipe = parse_recipe({
        "name": "t", "policy": {"backend": "vllm", "model": "some/model"},
        "prm": {"family": "policy-confidence", "args": {"aggregation": "last"}},
        "search": {"share_bon_samples": True},
        "strategies": {"best_of_n": {}}, "budgets": [4],
    })
    assert recipe.prm.model is None and recipe.sweep.prm_family == "policy-confidence"
    assert recipe.sweep.share_bon_samples and recipe.sweep.prm_args == {"aggregation": "last"}
    scorer = recipe.build_scorer()
    assert isinstance(scorer, PolicyLogprobScorer) and scorer.aggregation == "last"


def test_a_family_alone_names_a_scorer_that_needs_no_model():
    from prmsearch.api import MissingModelError, reads_no_scores, resolve_scorer
    from prmsearch.scorers.confidence import PolicyLogprobScorer

    assert isinstance(resolve_scorer(None, "policy-confidence", aggregation="last"), PolicyLogprobScorer)
    with pytest.raises(MissingModelError, match=r"scorer 'qwen-prm' needs a model"):
        resolve_scorer(None, "qwen-prm")
    greedy, beam = make_strategy("greedy"), make_strategy("beam")
    assert reads_no_scores([greedy], None, None) and not reads_no_scores([greedy, beam], None)
    assert not reads_no_scores([greedy], "policy-confidence")


def test_the_cli_quiets_the_engines_unless_asked_or_the_user_set_a_level(monkeypatch, capsys):
    from prmsearch.cli import main
    from prmsearch.cli.quiet import ENGINE_SWITCHES

    for variable, _, _ in ENGINE_SWITCHES:
        monkeypatch.delenv(variable, raising=False)
    assert main(["strategies"]) == 0
    assert os.environ["VLLM_LOGGING_LEVEL"] == "CRITICAL"
    assert os.environ["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"  # never between the answer's lines
    assert os.environ["PYTHONWARNINGS"] == "ignore" and os.environ["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    monkeypatch.delenv("VLLM_LOGGING_LEVEL")
    assert main(["strategies", "--verbose"]) == 0
    assert os.environ["VLLM_LOGGING_LEVEL"] == "INFO"
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    assert main(["strategies"]) == 0
    assert os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG"  # the user's choice stands
