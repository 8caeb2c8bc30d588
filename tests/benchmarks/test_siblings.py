"""Best-of-N-family siblings: rows re-selected from one run's candidates at the same budget are
exactly the rows (answers and costs) that real runs write, wall time aside."""

from __future__ import annotations

import json

import pytest
from helpers import synthetic_backends

from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.analysis.report import summarize
from prmsearch.benchmarks.sweeps.config import SweepConfig, family_runners
from prmsearch.benchmarks.sweeps.siblings import family_selection, select_candidate, sibling_ledger
from prmsearch.benchmarks.sweeps.sweep import SweepProblem, run_sweep
from prmsearch.search.protocol import strategy_names, strategy_spec

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


def without_wall_time(row):
    ledger = {k: v for k, v in (row["ledger"] or {}).items() if k != "wall_s"}
    return {**row, "ledger": ledger}


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
    assert select_candidate([cand(None, 0.1), cand(None, 0.7)], "majority") == 1  # no answers: argmax
    groups = [cand("1/2", 0.3, group=0), cand("0.5", 0.3, group=0), cand("7", 0.9, group=1)]
    assert select_candidate(groups, "majority") == 0  # equivalent answers vote together
    with pytest.raises(ValueError, match="at least one"):
        select_candidate([], "argmax")


def test_family_selection_and_prm_free_ledgers():
    assert family_selection("self_consistency") == (family_selection("self_consistency")[0], False)
    assert family_selection("best_of_n")[1] is True
    assert family_selection("best_of_n", {"selection": "majority"})[1] is False
    with pytest.raises(ValueError, match="not in the best-of-N family"):
        family_selection("beam")
    ledger = {"policy_flops": 10, "prm_flops": 5, "flops": 15, "prm_calls": 3, "prm_tokens_computed": 7,
              "prm_tokens_cached": 1, "generated_tokens": 4, "wall_s": 2.0}
    assert sibling_ledger(ledger, True) == {**ledger, "wall_s": None}  # same costs, time not measured
    assert sibling_ledger(ledger, False) == {**ledger, "prm_flops": 0, "flops": 10, "prm_calls": 0,
                                             "prm_tokens_computed": 0, "prm_tokens_cached": 0,
                                             "wall_s": None}
    assert sibling_ledger(None, True) is None


def test_the_runner_reads_scores_when_a_sibling_needs_them():
    config = SweepConfig(strategies=FAMILY, budgets=(2, 4), share_bon_samples=True)
    # self_consistency comes first but reads no score: best_of_n runs, the others re-select
    assert family_runners(config) == {s: "best_of_n" for s in FAMILY}
    assert set(config.cells()) == {("best_of_n", 2, 0), ("best_of_n", 4, 0)}  # every budget runs
    alone = SweepConfig(strategies=("self_consistency",), budgets=(4,), share_bon_samples=True)
    assert family_runners(alone) == {"self_consistency": "self_consistency"}
    other = SweepConfig(strategies=FAMILY, budgets=(2, 4), share_bon_samples=True,
                        options={"weighted_vote": {"aggregation": "last"}})  # fmt: skip
    assert family_runners(other) == {"best_of_n": "best_of_n", "self_consistency": "best_of_n",
                                     "weighted_vote": "weighted_vote"}  # fmt: skip
    assert config.to_dict()["share_bon_samples"] is True
    assert "share_bon_samples" not in SweepConfig().to_dict()  # older manifests still resume


def sweep(out, config, **kw):
    policy, scorer = synthetic_backends(depth=2)
    return run_sweep(config, PROBLEMS, out, policy=policy, scorer=scorer, grade=grade,
                     matcher=AnswerMatcher(), progress=False, **kw)  # fmt: skip


@pytest.mark.parametrize("budgets", [(4,), (1, 2, 4)])
def test_sibling_rows_equal_real_runs_field_by_field(tmp_path, budgets):
    strategies = ("greedy", *FAMILY)
    shared = sweep(tmp_path / "shared", SweepConfig(strategies=strategies, budgets=budgets, seeds=(0, 1),
                                                    share_bon_samples=True))  # fmt: skip
    real = sweep(tmp_path / "real", SweepConfig(strategies=strategies, budgets=budgets, seeds=(0, 1)))
    real_rows = {key(r): r for r in real.rows()}
    rows = list(shared.rows())
    assert sorted(map(key, rows)) == sorted(real_rows)  # one row per problem and cell, no more
    derived = [r for r in rows if r.get("derived_from")]
    assert {r["strategy"] for r in derived} == {"self_consistency", "weighted_vote"}
    for row in derived:
        twin = real_rows[key(row)]
        assert row["ledger"]["wall_s"] is None  # not measured, never copied
        ignore = {"steps", "step_scores", "derived_from"}  # a derived row keeps only candidates
        mine = {k: v for k, v in without_wall_time(row).items() if k not in ignore}
        theirs = {k: v for k, v in without_wall_time(twin).items() if k not in ignore}
        assert mine == theirs, key(row)
    sc = [r for r in derived if r["strategy"] == "self_consistency"]
    assert all(r["ledger"]["prm_flops"] == 0 and r["ledger"]["prm_calls"] == 0 for r in sc)
    runs = summarize(rows, "toy", len(PROBLEMS))["runs"]
    assert {r["strategy"] for r in runs if r["derived_from"]} == {"self_consistency", "weighted_vote"}
    assert all(r["wall_s"] != r["wall_s"] for r in runs if r["derived_from"])  # NaN: not measured


def test_killed_before_the_siblings_resume_derives_them_once(tmp_path):
    config = SweepConfig(strategies=FAMILY, budgets=(2, 4), share_bon_samples=True)
    folder = sweep(tmp_path, config)
    keys = sorted(key(r) for r in folder.rows())
    lines = folder.results_path.read_text().splitlines(keepends=True)
    folder.results_path.write_text("".join(line for line in lines if '"derived_from"' not in line))
    resumed = sweep(tmp_path, config, resume=True)
    assert sorted(key(r) for r in resumed.rows()) == keys
    on_disk = [key(json.loads(line)) for line in resumed.results_path.read_text().splitlines()]
    assert len(on_disk) == len(set(on_disk))


def test_cli_share_bon_samples(tmp_path, capsys):
    from prmsearch import register_policy, register_scorer
    from prmsearch.cli import main

    policy, scorer = synthetic_backends(depth=2)
    register_policy("test-siblings", lambda **_: policy, replace=True)
    register_scorer("test-siblings", lambda **_: scorer, replace=True)
    args = ["bench", "--limit", "2", "--strategies", "self_consistency,best_of_n,beam", "--budgets", "2,4",
            "--policy", "test-siblings", "--prm", "test-siblings", "--out", str(tmp_path), "--no-progress",
            "--json"]  # fmt: skip
    assert main(args) == 0  # sharing is on by default
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["strategy"], r["budget"], r["derived_from"]) for r in runs] == [
        ("beam", 2, None),
        ("beam", 4, None),
        ("best_of_n", 2, None),
        ("best_of_n", 4, None),
        ("self_consistency", 2, "best_of_n"),
        ("self_consistency", 4, "best_of_n"),
    ]


def test_the_best_of_n_family_is_the_strategies_that_say_so():
    family = {s for s in strategy_names() if strategy_spec(s).sample_family is not None}
    assert set(FAMILY) <= family  # (other tests may register more strategies on these configs)
    assert family.isdisjoint({"greedy", "beam", "dvts", "mcts", "particle_filter", "rebase", "planner"})
