"""Best-of-N-family results at smaller budgets derived from a larger run: same selection rules,
marked as subsampled, and equal to real runs when samples are prefix-stable."""

from __future__ import annotations

import json

import pytest
from helpers import synthetic_backends

from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.report import summarize
from prmsearch.benchmarks.subsample import (
    default_selection,
    scaled_ledger,
    select_candidate,
    subsampled_rows,
)
from prmsearch.benchmarks.sweep import SweepProblem, run_sweep
from prmsearch.benchmarks.sweep_config import SweepConfig, family_sources

FAMILY = ("best_of_n", "self_consistency", "weighted_vote")
PROBLEMS = [SweepProblem(f"p{i}", f"problem {i}", str(i % 4)) for i in range(6)]


def grade(answer, gold):
    return answer is not None and canonical_answer(answer) == canonical_answer(gold)


def cand(answer, score, group=None):
    data = {"answer": answer, "score": score}
    if group is not None:
        data["group"] = group
    return data


def key(row):
    return (row["qid"], row["strategy"], row["budget"], row["seed"])


def test_selection_rules_and_ties():
    cands = [cand("1", 0.5), cand("2", 0.9), cand("2", 0.1), cand(None, 0.99), cand("3", 0.9)]
    assert select_candidate(cands, "argmax") == 1  # unanswered excluded; tie 0.9 -> earliest
    assert select_candidate(cands, "majority") == 1  # "2" has two votes; its best path
    assert select_candidate(cands, "weighted") == 1  # "2": 1.0 > "3": 0.9
    tie = [cand("1", 0.2), cand("2", 0.3), cand("1", 0.4), cand("2", 0.2)]
    assert select_candidate(tie, "majority") == 2  # 2-2 votes: "1" weighs 0.6 > 0.5
    unscored = [cand("1", None), cand("2", 0.0)]
    assert select_candidate(unscored, "argmax") == 1  # unscored ranks below every score
    assert select_candidate(unscored, "weighted") == 0  # and weighs nothing: 0-0, earliest wins
    assert select_candidate([cand("1", None), cand("2", 0.1)], "weighted") == 1
    assert select_candidate([cand(None, 0.1), cand(None, 0.7)], "majority") == 1  # no answers: argmax
    groups = [cand("1/2", 0.3, group=0), cand("0.5", 0.3, group=0), cand("7", 0.9, group=1)]
    assert select_candidate(groups, "majority") == 0  # equivalent answers vote together
    with pytest.raises(ValueError, match="at least one"):
        select_candidate([], "argmax")


def row(strategy="weighted_vote", budget=4, error=None, **extra):
    return {
        "qid": "q",
        "strategy": strategy,
        "budget": budget,
        "seed": 0,
        "answer": "2",
        "gold": "1",
        "correct": False,
        "score": 0.9,
        "steps": ["a"],
        "step_scores": [0.9],
        "ledger": {
            "generations": 4,
            "generated_tokens": 40,
            "prompt_tokens_computed": 10,
            "policy_calls": 1,
            "prm_calls": 4,
            "prm_tokens_computed": 200,
            "prm_flops": 800,
            "policy_flops": 100,
            "flops": 900,
            "wall_s": 2.0,
        },
        "error": error,
        "candidates": [cand("1", 0.6), cand("2", 0.9), cand("1", 0.5), cand("2", 0.2)],
        **extra,
    }


def test_hand_made_rows_are_subsampled_and_marked():
    derived = {r["budget"]: r for r in subsampled_rows([row()], (1, 2, 4, 8), grade=grade)}
    assert sorted(derived) == [1, 2]  # only budgets below the run's
    one, two = derived[1], derived[2]
    assert one["answer"] == "1" and one["correct"] is True and one["score"] == 0.6
    assert two["answer"] == "2" and two["correct"] is False  # "2" weighs 0.9 > 0.6
    assert one["subsampled"] is True and one["subsampled_from"] == 4 and one["steps"] == []
    assert len(two["candidates"]) == 2
    ledger = two["ledger"]
    assert ledger["generations"] == 2 and ledger["generated_tokens"] == 20 and ledger["policy_calls"] == 1
    assert ledger["policy_flops"] == 60 and ledger["prm_flops"] == 400 and ledger["flops"] == 460
    assert ledger["wall_s"] == 1.0
    (weighted,) = subsampled_rows([row()], (3,), grade=grade)
    assert weighted["answer"] == "1"  # "1" weighs 0.6 + 0.5 > 0.9
    (argmax,) = subsampled_rows([row()], (3,), grade=grade, selections={"weighted_vote": "argmax"})
    assert argmax["answer"] == "2" and argmax["score"] == 0.9


def test_seeded_draws_errors_and_refusals():
    first = subsampled_rows([row()], (2,), seed=3, grade=grade)
    assert first == subsampled_rows([row()], (2,), seed=3, grade=grade)  # reproducible
    draws = {
        tuple(c["score"] for c in subsampled_rows([row()], (2,), seed=s, grade=grade)[0]["candidates"])
        for s in range(20)
    }
    assert len(draws) > 1 and all(len(d) == 2 for d in draws)
    (failed,) = subsampled_rows([row(error="boom", candidates=[])], (2,), grade=grade)
    assert failed["error"] == "boom" and failed["answer"] is None and failed["correct"] is False
    assert subsampled_rows([row("beam")], (2,), grade=grade) == []  # not in the family: ignored
    with pytest.raises(ValueError, match="no candidates"):
        subsampled_rows([row(candidates=[])], (2,), grade=grade)
    with pytest.raises(ValueError, match="cannot be subsampled"):
        default_selection("beam")
    assert default_selection("best_of_n", {"selection": "majority"}).value == "majority"
    assert scaled_ledger(None, 0.5) is None


def sweep(out, config, **kw):
    policy, scorer = synthetic_backends(depth=2)
    return run_sweep(
        config,
        PROBLEMS,
        out,
        policy=policy,
        scorer=scorer,
        grade=grade,
        matcher=AnswerMatcher(),
        progress=False,
        **kw,
    )


def test_prefix_subsample_equals_real_runs(tmp_path):
    """The scripted policy's i-th sample depends only on the request seed and i, so the first N'
    candidates of a run at N are exactly a run at N': the derived rows must match real ones."""
    config = SweepConfig(strategies=FAMILY, budgets=(1, 2, 4, 8), seeds=(0, 1))
    rows = list(sweep(tmp_path, config).rows())
    real = {key(r): r for r in rows}
    largest = [r for r in rows if r["budget"] == 8]
    for r in largest:  # re-selecting among all candidates gives back the row itself
        chosen = r["candidates"][select_candidate(r["candidates"], default_selection(r["strategy"]))]
        assert len(r["candidates"]) == 8 and (chosen["answer"], chosen["score"]) == (r["answer"], r["score"])
    assert subsampled_rows(largest, (8, 16), grade=grade) == []  # nothing below the run's budget
    derived = subsampled_rows(largest, (1, 2, 4), grade=grade)
    assert len(derived) == 3 * len(largest)
    for d in derived:
        r = real[key(d)]
        assert (d["answer"], d["correct"], d["score"]) == (r["answer"], r["correct"], r["score"])
        assert d["candidates"] == r["candidates"]


def test_sweep_with_subsample_bon(tmp_path):
    config = SweepConfig(strategies=("greedy", *FAMILY), budgets=(1, 2, 4), subsample_bon=True)
    # the three draw the same samples: only the first runs, at the largest budget
    assert {c for c in config.cells() if c[0] in FAMILY} == {("best_of_n", 4, 0)}
    assert config.to_dict()["subsample_bon"] is True
    assert "subsample_bon" not in SweepConfig().to_dict()  # older manifests still resume
    folder = sweep(tmp_path, config)
    rows = list(folder.rows())
    keys = [key(r) for r in rows]
    assert len(keys) == len(set(keys)) == len(PROBLEMS) * (1 + 3 * 3)
    ran = {("greedy", 1), ("best_of_n", 4)}
    assert all(r.get("subsampled", False) == ((r["strategy"], r["budget"]) not in ran) for r in rows)
    assert {r.get("derived_from") for r in rows if r["strategy"] != "best_of_n"} <= {None, "best_of_n"}
    runs = summarize(rows, "toy", len(PROBLEMS))["runs"]
    assert {(r["strategy"], r["budget"]) for r in runs if r["subsampled"]} == {
        (s, b) for s in FAMILY for b in (1, 2, 4)
    } - ran
    real = sweep(tmp_path / "full", SweepConfig(strategies=FAMILY, budgets=(1, 2, 4)))
    full = {key(r): r for r in real.rows()}
    for r in rows:
        if r.get("subsampled"):
            assert (r["answer"], r["correct"], r["score"]) == (
                full[key(r)]["answer"],
                full[key(r)]["correct"],
                full[key(r)]["score"],
            )
    # killed after the run at 4 but before the derived rows: resume derives them, once
    lines = folder.results_path.read_text().splitlines(keepends=True)
    folder.results_path.write_text("".join(line for line in lines if '"subsampled": true' not in line))
    resumed = list(sweep(tmp_path, config, resume=True).rows())
    assert sorted(map(key, resumed)) == sorted(keys)


def test_siblings_with_other_sampling_run_on_their_own():
    config = SweepConfig(
        strategies=FAMILY,
        budgets=(2, 4),
        subsample_bon=True,
        options={"weighted_vote": {"aggregation": "last"}},
    )
    assert family_sources(config) == {
        "best_of_n": "best_of_n",
        "self_consistency": "best_of_n",
        "weighted_vote": "weighted_vote",
    }
    assert {c for c in config.cells()} == {("best_of_n", 4, 0), ("weighted_vote", 4, 0)}
    with pytest.raises(ValueError, match="as_strategy"):
        subsampled_rows([row()], (2,), grade=grade, as_strategy="beam")


def test_cli_subsample_bon(tmp_path, capsys):
    from prmsearch import register_policy, register_scorer
    from prmsearch.cli import main

    policy, scorer = synthetic_backends(depth=2)
    register_policy("test-subsample", lambda **_: policy, replace=True)
    register_scorer("test-subsample", lambda **_: scorer, replace=True)
    args = [
        "bench",
        "--limit",
        "2",
        "--strategies",
        "best_of_n,beam",
        "--budgets",
        "2,4",
        "--policy",
        "test-subsample",
        "--prm",
        "test-subsample",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--json",
        "--subsample-bon",
    ]
    assert main(args) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["strategy"], r["budget"], r["subsampled"]) for r in runs] == [
        ("beam", 2, False),
        ("beam", 4, False),
        ("best_of_n", 2, True),
        ("best_of_n", 4, False),
    ]
