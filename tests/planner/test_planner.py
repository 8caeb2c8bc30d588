"""The compute-optimal planner: its probe and delegation on scripted backends, the plan's
validation, the fit on a hand-made results folder, and ``plan fit`` + ``bench -o planner.plan``
end to end on the embedded models."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import run_one

from prmsearch.cli import main
from prmsearch.conformance import check_strategy
from prmsearch.planner.cv import cross_validate, cv_markdown, replay_plan
from prmsearch.planner.fit import (
    FitConfig,
    choose_arms,
    fit_folder,
    quantile_edges,
    read_run,
)
from prmsearch.planner.plan import DEFAULT_PLAN, Plan, PlanArm, leader_mass, load_plan
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import make_strategy
from prmsearch.search.selection import Ballot
from prmsearch.tree import ROOT

PROBE = 4


def script(question, steps, index, seed):
    """Two steps, then an answer: always 7 for "easy ...", spread over 0-9 for "hard ..."."""
    if len(steps) < 2:
        return f"step {len(steps)} of {question} ({index} {seed % 1000})"
    if question.startswith("easy"):
        return "so \\boxed{7}"
    rng = np.random.default_rng([seed, index, len(steps)])
    return f"so \\boxed{{{int(rng.integers(10))}}}"


def scores(question, steps):
    """Sure steps for the easy problem, doubtful ones for the hard one."""
    return 0.95 if question.startswith("easy") else 0.4


def backends():
    return ScriptedPolicy(script), ScriptedScorer(scores)


def two_bin_plan(hard_arm, easy_arm=None, edge=0.5, n=8):
    """A plan with one edge: below ``edge`` (hard) ``hard_arm``, else ``easy_arm`` (the probe)."""
    easy_arm = easy_arm or {"strategy": "probe", "budget": 0}
    return {"probe": PROBE, "edges": [edge], "levels": [{"n": n, "arms": [hard_arm, easy_arm]}]}


def planner(**options):
    return make_strategy("planner", **{"n": 8, **options})


# -- the difficulty feature ---------------------------------------------------------------------


def test_leader_mass_is_the_leading_answers_score_mass_per_sample():
    cands = [Ballot(1, 0.9, 0), Ballot(1, 0.7, 1), Ballot(2, 0.8, 2), Ballot(None, 0.9, 3)]
    assert leader_mass(cands, 4) == pytest.approx((0.9 + 0.7) / 4)  # unanswered counts, votes nothing
    assert leader_mass([Ballot(3, -math.inf, 0)], 1) == 0.0  # unscored weighs nothing
    assert leader_mass([Ballot(5, 1.0, i) for i in range(4)], 4) == 1.0


# -- the strategy on scripted backends ----------------------------------------------------------


def test_probe_is_charged_like_weighted_vote_and_an_easy_problem_stops_there():
    plan = two_bin_plan({"strategy": "beam", "budget": 4, "options": {"width": 2}})
    result, _ = run_one(*backends(), planner(plan=plan), question="easy one")
    alone, _ = run_one(*backends(), make_strategy("weighted_vote", n=PROBE), question="easy one")
    assert result.answer == "7"
    assert len(result.tree.children(ROOT)) == PROBE  # the probe only
    assert result.ledger.to_dict() | {"wall_s": 0} == alone.ledger.to_dict() | {"wall_s": 0}
    assert result.ledger.generations == PROBE and result.ledger.prm_calls > 0 and result.ledger.flops > 0


def test_a_hard_problem_delegates_on_the_same_tree_and_pays_for_both():
    plan = two_bin_plan({"strategy": "beam", "budget": 4, "options": {"width": 2}})
    result, _ = run_one(*backends(), planner(plan=plan), question="hard one")
    probe, _ = run_one(*backends(), make_strategy("weighted_vote", n=PROBE), question="hard one")
    beam, _ = run_one(*backends(), make_strategy("beam", n=4, width=2), question="hard one")
    # the probe's 4 whole solutions and beam's 4 first steps all hang below the root of one tree
    assert len(result.tree.children(ROOT)) == PROBE + 4
    # every generation and every scoring is charged: the probe's and the delegate's
    assert result.ledger.generations == probe.ledger.generations + beam.ledger.generations == 4 + 12
    assert result.ledger.policy_calls == probe.ledger.policy_calls + beam.ledger.policy_calls
    assert result.ledger.prm_calls == probe.ledger.prm_calls + beam.ledger.prm_calls
    assert result.ledger.flops > max(probe.ledger.flops, beam.ledger.flops)
    # final="delegate": beam's own choice among its finished beams, not a probe sample
    probe_leaves = {n for n in range(1, len(result.tree)) if result.tree.depth[n] == 3} & set(
        range(1, 1 + 3 * PROBE))
    assert result.node not in probe_leaves
    assert len(result.candidates) == 2  # n / width beams


def test_a_sampling_arm_extends_the_probe_instead_of_paying_it_twice():
    plan = two_bin_plan({"strategy": "weighted_vote", "budget": 8})
    result, _ = run_one(*backends(), planner(plan=plan), question="hard one")
    alone, _ = run_one(*backends(), make_strategy("weighted_vote", n=8), question="hard one")
    probe_leaves = [c.node for c in result.candidates[:PROBE]]
    assert len(result.candidates) == 8 and result.ledger.generations == alone.ledger.generations == 8
    more = [c.node for c in result.candidates[PROBE:]]
    assert probe_leaves == sorted(probe_leaves) and max(probe_leaves) < min(more)  # the probe comes first
    assert len(result.tree.children(ROOT)) == 8
    small = two_bin_plan({"strategy": "best_of_n", "budget": 2})  # below the probe: its first 2 samples
    result, _ = run_one(*backends(), planner(plan=small), question="hard one")
    assert result.ledger.generations == PROBE and len(result.candidates) == 2


def test_final_vote_pools_the_probe_and_the_delegates_candidates():
    plan = two_bin_plan({"strategy": "beam", "budget": 4, "options": {"width": 2}})
    result, _ = run_one(*backends(), planner(plan=plan, final="vote"), question="hard one")
    assert len(result.candidates) == PROBE + 2  # the probe's 4 samples and beam's 2 finished beams
    delegate, _ = run_one(*backends(), planner(plan=plan), question="hard one")
    assert len(delegate.candidates) == 2
    assert [c.node for c in result.candidates[PROBE:]] == [c.node for c in delegate.candidates]


def test_budget_zero_for_every_bin_never_searches_beyond_the_probe():
    plan = {"probe": 3, "edges": [], "levels": [{"n": 2, "arms": [{"strategy": "probe", "budget": 0}]}]}
    result, _ = run_one(*backends(), planner(plan=plan, n=2), question="hard one")
    assert result.ledger.generations == 3 and len(result.candidates) == 3


def test_the_default_plan_runs_without_fitting_and_conforms():
    bound = make_strategy("planner")
    assert bound.config.plan == Plan.from_dict(DEFAULT_PLAN) and bound.config.n == 16
    for n in (4, 8, 16):
        result, _ = run_one(*backends(), make_strategy("planner", n=n), question="hard one")
        assert result.error is None and result.answer is not None
    # the kit's budget rule (at most n per round, n x depth in all) holds where the probe and the
    # arm together stay within the level; the default plan gives its hardest bin more (beam@4 and
    # then particle_filter@4, beam@16 or particle_filter@32) by design: a level is a mean, not a cap
    within = {"probe": {"strategy": "beam", "budget": 4}, "edges": [0.5],
              "levels": [{"n": 16, "arms": [{"strategy": "particle_filter", "budget": 8},
                                            {"strategy": "probe", "budget": 0}]}]}
    check_strategy("planner", plan=within)
    check_strategy("planner", plan=within, final="vote")


def test_max_budget_is_the_levels_worst_case_not_its_mean():
    assert [make_strategy("planner", n=n).config.max_budget for n in (4, 8, 16)] == [4 + 4, 4 + 16, 4 + 32]
    plan = two_bin_plan({"strategy": "beam", "budget": 12, "options": {"width": 4}})
    assert planner(plan=plan).config.max_budget == PROBE + 12  # a probe of k samples counts k
    assert make_strategy("beam", n=8).config.max_budget == 8  # every other strategy: n is the cap


def test_same_seed_same_search():
    plan = two_bin_plan({"strategy": "particle_filter", "budget": 4})
    a, _ = run_one(*backends(), planner(plan=plan), question="hard one", seed=3)
    b, _ = run_one(*backends(), planner(plan=plan), question="hard one", seed=3)
    assert (a.node, a.answer, a.ledger.generations) == (b.node, b.answer, b.ledger.generations)


def search_probe_plan(hard_arm, edge=0.5, n=8):
    """A two-bin plan whose probe is a search: beam at 4 (width 2, so 2 finished beams)."""
    return {"probe": {"strategy": "beam", "budget": 4, "options": {"width": 2}}, "edges": [edge],
            "levels": [{"n": n, "arms": [hard_arm, {"strategy": "probe", "budget": 0}]}]}


def test_a_search_probe_answers_an_easy_problem_itself_at_its_own_cost():
    plan = search_probe_plan({"strategy": "beam", "budget": 8, "options": {"width": 2}})
    result, _ = run_one(*backends(), planner(plan=plan), question="easy one")
    alone, _ = run_one(*backends(), make_strategy("beam", n=4, width=2), question="easy one")
    assert result.node == alone.node and result.answer == alone.answer == "7"
    assert [c.node for c in result.candidates] == [c.node for c in alone.candidates]
    assert result.ledger.to_dict() | {"wall_s": 0} == alone.ledger.to_dict() | {"wall_s": 0}
    # two finished beams, both answering 7 with path score 0.95: leader mass 0.95, the easy bin
    assert result.report == {"bin": 1, "difficulty": pytest.approx(0.95), "arm": "probe"}


def test_a_search_probe_escalates_a_hard_problem_and_pays_for_both():
    plan = search_probe_plan({"strategy": "weighted_vote", "budget": 6})
    result, _ = run_one(*backends(), planner(plan=plan), question="hard one")
    probe, _ = run_one(*backends(), make_strategy("beam", n=4, width=2), question="hard one")
    vote, _ = run_one(*backends(), make_strategy("weighted_vote", n=6), question="hard one")
    # a sampling arm after a search probe draws all its own samples (beam's paths are not samples)
    assert len(result.candidates) == 6
    assert result.ledger.generations == probe.ledger.generations + vote.ledger.generations
    assert result.ledger.prm_calls == probe.ledger.prm_calls + vote.ledger.prm_calls
    assert result.report["bin"] == 0 and result.report["arm"] == "weighted_vote@6"
    assert result.report["difficulty"] < 0.5
    # the probe's beam ran first on the tree, exactly as beam alone: its nodes come first
    assert result.tree.step_text[: len(probe.tree)] == probe.tree.step_text


# -- validation: errors name the field ----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["levels"][0]["arms"][0].update(budget=-1), r"plan.levels\[0\].arms\[0\].budget must be"),
        (lambda p: p["levels"][0]["arms"][1].update(budget=3), r"levels\[0\].arms\[1\].budget must be 0"),
        (lambda p: p["levels"][0]["arms"][0].update(strategy="bem"), r"plan.levels\[0\].arms\[0\].*unknown"),
        (lambda p: p["levels"][0]["arms"][0].update(strategy="mcts"), r"arms\[0\].strategy 'mcts' is not"),
        (lambda p: p["levels"][0]["arms"][0].update(strategy="planner"), r"arms\[0\].strategy 'planner'"),
        (lambda p: p["levels"][0]["arms"][0].update(options={"n": 4}), r"arms\[0\].options must not set n"),
        (lambda p: p["levels"][0]["arms"][0].update(options={"width": 3}), r"arms\[0\] does not build"),
        (lambda p: p["levels"][0]["arms"].pop(), r"plan.levels\[0\].arms must hold one arm per bin"),
        (lambda p: p.update(edges=[0.6, 0.2]), r"plan.edges must be strictly ascending"),
        (lambda p: p.update(edges=["x"]), r"plan.edges\[0\] must be a finite number"),
        (lambda p: p.update(probe=0), r"plan.probe must be a number of whole solutions \(an int"),
        (lambda p: p.update(probe={"strategy": "probe", "budget": 0}), r"plan.probe must search"),
        (lambda p: p.update(probe={"strategy": "mcts", "budget": 4}), r"plan.probe.strategy 'mcts' is not"),
        (lambda p: p.update(probe={"strategy": "beam"}), r"plan.probe lacks the key\(s\) budget"),
        (lambda p: p.update(probe={"strategy": "beam", "budget": 4, "options": {"aggregation": "last"}}),
         r"plan.probe.options aggregation must be the plan's \(min\)"),
        (lambda p: p.update(aggregation="max"), r"plan.aggregation must be one of"),
        (lambda p: p.update(levels=[]), r"plan.levels must hold at least one level"),
        (lambda p: p["levels"].append(dict(p["levels"][0])), r"plan.levels\[1\].n repeats"),
        (lambda p: p.update(extra=1), r"plan has unknown key\(s\) extra"),
        (lambda p: p.update(format="v0"), r"plan.format must be"),
    ],
)
def test_plan_errors_name_the_field(change, message):
    plan = two_bin_plan({"strategy": "beam", "budget": 4, "options": {"width": 2}})
    change(plan)
    with pytest.raises(ValueError, match=message):
        make_strategy("planner", n=8, plan=plan)


def test_the_planner_takes_the_plans_aggregation_unless_told():
    plan = {**two_bin_plan({"strategy": "beam", "budget": 4}), "aggregation": "last"}
    assert planner(plan=plan).config.aggregation.value == "last"
    assert planner(plan=plan, aggregation="last").config.aggregation.value == "last"
    with pytest.raises(ValueError, match=r"aggregation must be the plan's \(last\).*leave it out"):
        planner(plan=plan, aggregation="min")
    assert planner().config.aggregation.value == "min"  # the default plan's (beam's)


def test_config_errors_name_the_option():
    plan = two_bin_plan({"strategy": "beam", "budget": 4})
    with pytest.raises(ValueError, match=r"n must be one of the plan's levels \(8\), got 4"):
        make_strategy("planner", n=4, plan=plan)
    with pytest.raises(ValueError, match=r"aggregation must be the plan's \(min\)"):
        make_strategy("planner", n=8, plan=plan, aggregation="last")
    with pytest.raises(ValueError, match=r"final must be one of delegate, vote"):
        make_strategy("planner", n=8, plan=plan, final="best")
    with pytest.raises(ValueError, match=r"plan must be a plan's JSON data .*-o planner.plan=PLAN.json"):
        make_strategy("planner", n=8, plan="plan.json")  # files are read by the CLI, never here


# -- fitting ------------------------------------------------------------------------------------


def test_choose_arms_is_the_best_choice_within_the_target():
    options = [[(0.0, 4.0), (0.5, 10.0), (0.9, 30.0)], [(0.8, 4.0), (1.0, 10.0)]]
    assert choose_arms(options, [0.5, 0.5], 7.0) == ([1, 0], True)  # 0.5*10 + 0.5*4 = 7
    assert choose_arms(options, [0.5, 0.5], 20.0) == ([2, 1], True)
    assert choose_arms(options, [0.5, 0.5], 3.0) == ([0, 0], False)  # below the cheapest: cheapest


def test_quantile_edges_cut_halfway_between_values():
    assert quantile_edges([0.1, 0.2, 0.3, 0.9, 0.95, 1.0], 2) == (0.6,)
    assert quantile_edges([0.5] * 6, 3) == (0.5,)  # ties: one edge, never repeated


def write_folder(folder, split="validation"):
    """Six problems: three hard (low probe confidence), three easy; see the expected plan below."""
    strategies = ["best_of_n", "weighted_vote", "beam"]
    config = {"dataset": "arith", "split": split, "strategies": strategies, "budgets": [4, 16],
              "seeds": [0], "options": {}}
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"config": config}))
    features = {"q1": 0.1, "q2": 0.2, "q3": 0.3, "q4": 0.9, "q5": 0.95, "q6": 1.0}
    table = {  # (strategy, budget): (flops, correct per problem q1..q6)
        ("weighted_vote", 4): (4, "FFFTTT"),
        ("best_of_n", 4): (4, "FFFTTT"),
        ("best_of_n", 16): (16, "TFFTTT"),
        ("beam", 4): (6, "TFFTTT"),
        ("beam", 16): (20, "TTFTTT"),
        ("weighted_vote", 16): (16, "TFFTTT"),
    }
    lines = []
    for (strategy, budget), (flops, marks) in table.items():
        for (qid, feature), mark in zip(features.items(), marks):
            samples = 4 if strategy == "weighted_vote" else 1
            candidates = [{"answer": "1", "group": 0, "score": feature}] * samples
            lines.append(json.dumps({
                "qid": qid, "strategy": strategy, "budget": budget, "seed": 0, "answer": "1", "gold": "1",
                "correct": mark == "T", "score": None, "ledger": {"flops": flops}, "error": None,
                "candidates": candidates,
            }))
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")


def test_fit_picks_the_best_arm_per_bin_within_the_reference_flops(tmp_path):
    write_folder(tmp_path / "val")
    config = FitConfig(levels=(4, 16), bins=2, probe_strategy="weighted_vote")  # a probe of samples
    plan, fitted, facts = fit_folder(tmp_path / "val", config)
    assert plan.edges == (0.6,) and facts["bin_sizes"] == [3, 3] and facts["problems"] == 6
    arms = {level.n: [(a.strategy, a.budget, dict(a.options)) for a in level.arms] for level in plan.levels}
    # level 4: best_of_n@4 costs 4 per problem, exactly the probe: stop at the probe everywhere
    assert arms[4] == [("probe", 0, {}), ("probe", 0, {})]
    # level 16 (target 16): easy problems stop at the probe (4), so hard ones can afford beam@16
    # (probe 4 + 20 = 24; mean (24 + 4) / 2 = 14 <= 16), the best arm on them (2 of 3)
    assert arms[16] == [("beam", 16, {"width": 4}), ("probe", 0, {})]
    level16 = fitted[1]
    assert level16.target_flops == 16 and level16.flops == pytest.approx(14)
    assert level16.accuracy == pytest.approx((2 / 3 + 1) / 2) and level16.feasible
    assert level16.best_fixed[:2] == ("beam", 4)  # the best single run within 16 FLOPs: 4 of 6


def test_fit_with_a_search_probe_adds_every_arm_to_the_probes_cost(tmp_path):
    write_folder(tmp_path / "val")
    config = FitConfig(levels=(16,), bins=2, probe_strategy="beam", probe=4)
    plan, fitted, facts = fit_folder(tmp_path / "val", config)
    assert plan.probe == PlanArm("beam", 4, (("width", 4),)) and facts["probe"] == "beam n=4, width=4"
    # hard bin: beam@4 alone gets 1 of 3; beam@16 after it 2 of 3 at 6 + 20; easy bin: the probe, 6
    (level,) = fitted
    assert [(a.arm.strategy, a.arm.budget) for a in level.chosen] == [("beam", 16), ("probe", 0)]
    assert level.flops == pytest.approx((26 + 6) / 2) and level.accuracy == pytest.approx((2 / 3 + 1) / 2)
    # a sampling arm after a search probe is not an extension: it pays its own run in full
    hard = {row["arm"]: row for row in facts["arms_per_bin"][0]}
    assert hard["best_of_n n=16"]["flops"] == pytest.approx(6 + 16)
    assert hard["probe only"] == {"arm": "probe only", "accuracy": pytest.approx(1 / 3), "flops": 6}
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan and again.probe_text == "beam n=4, width=4"
    with pytest.raises(ValueError, match="probe_strategy 'planner' cannot probe"):
        FitConfig(probe_strategy="planner")


def test_replay_charges_a_plan_as_the_fit_does(tmp_path):
    write_folder(tmp_path / "val")
    runs = [read_run(tmp_path / "val")]
    plan = Plan.from_dict({"probe": {"strategy": "beam", "budget": 4}, "edges": [0.6],
                           "levels": [{"n": 16, "arms": [{"strategy": "beam", "budget": 16},
                                                         {"strategy": "probe", "budget": 0}]}]})
    # q1-q3 hard: beam@4 (6) then beam@16 (20), right on q1, q2; q4-q6 easy: beam@4 alone, all right
    accuracy, flops = replay_plan(plan, runs, ["q1", "q2", "q3", "q4", "q5", "q6"], ("beam", 4), 16, 0)
    assert accuracy == pytest.approx(5 / 6) and flops == pytest.approx((3 * 26 + 3 * 6) / 6)
    # after a probe of samples a sampling arm extends it: its own FLOPs only
    plan = Plan.from_dict({"probe": 4, "edges": [0.6], "levels": [
        {"n": 16, "arms": [{"strategy": "best_of_n", "budget": 16}, {"strategy": "probe", "budget": 0}]}]})
    _, flops = replay_plan(plan, runs, ["q1"], ("weighted_vote", 4), 16, 0)
    assert flops == 16


def test_cross_validation_judges_each_setting_on_held_out_problems(tmp_path, capsys):
    write_folder(tmp_path / "val")
    runs = [read_run(tmp_path / "val")]
    results = cross_validate(runs, FitConfig(levels=(4, 16)), [("weighted_vote", 4), ("beam", 4)], [1, 2])
    assert [(r.probe, r.bins, r.level) for r in results] == [
        (p, b, n) for p in ("weighted_vote@4", "beam@4") for b in (1, 2) for n in (4, 16)]
    assert all(0 <= r.accuracy <= 1 and r.flops > 0 for r in results)
    # a probe without a run is left out and named; none at all is an error naming the fix
    partial = cross_validate(runs, FitConfig(levels=(4,)), [("particle_filter", 4), ("beam", 4)], [2])
    assert {r.probe for r in partial} == {"beam@4"}
    assert "Left out (no run of the probe in the folders): particle_filter@4" in cv_markdown(
        partial, 2, [("particle_filter", 4), ("beam", 4)])
    with pytest.raises(ValueError, match=r"no probe has a run in the folders \(particle_filter@4\)"):
        cross_validate(runs, FitConfig(), [("particle_filter", 4)], [2])
    with pytest.raises(ValueError, match="folds must be an int >= 2"):
        cross_validate(runs, FitConfig(), [("beam", 4)], [2], folds=1)
    with pytest.raises(ValueError, match="6 problems are too few for 4 folds"):
        cross_validate(runs, FitConfig(), [("beam", 4)], [2], folds=4)
    assert main(["plan", "cv", str(tmp_path / "val"), "--probes", "weighted_vote@4,beam@4", "--bins", "1,2",
                 "--levels", "4,16"]) == 0
    out = capsys.readouterr().out
    assert "| beam@4 | 2 |" in out and "Best setting: probe" in out and "plan fit" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "cv", str(tmp_path / "val"), "--probes", "beam"])
    assert exit_info.value.code == 2 and "expected strategy@budget" in capsys.readouterr().err


def test_fit_refuses_the_test_split_and_missing_probe_rows(tmp_path):
    write_folder(tmp_path / "test", split="test")
    with pytest.raises(ValueError, match="validation"):
        fit_folder(tmp_path / "test", FitConfig(levels=(4,), bins=2))
    write_folder(tmp_path / "val")
    with pytest.raises(ValueError, match=r"no probe rows.*budget 8"):
        fit_folder(tmp_path / "val", FitConfig(levels=(4,), probe=8))
    with pytest.raises(ValueError, match="reference 'best_of_n' has no run at budget 8"):
        fit_folder(tmp_path / "val", FitConfig(levels=(8,)))


# -- end to end on the embedded models ----------------------------------------------------------


def test_plan_fit_then_bench_with_the_plan_file(tmp_path, capsys):
    val, test, plan_path = tmp_path / "val", tmp_path / "test", tmp_path / "plan.json"
    common = ["--dataset", "arith", "--limit", "3", "--no-progress"]
    assert main(["bench", *common, "--split", "validation", "--strategies", "best_of_n,weighted_vote,beam",
                 "--budgets", "4,8", "--out", str(val)]) == 0
    assert main(["plan", "fit", str(val), "--out", str(plan_path), "--levels", "4,8", "--bins", "2"]) == 0
    plan = load_plan(plan_path)
    assert [level.n for level in plan.levels] == [4, 8] and plan.probe == PlanArm("beam", 4, (("width", 4),))
    assert json.loads(plan_path.read_text())["fit"]["problems"] == 3
    assert main(["bench", *common, "--split", "test", "--strategies", "planner,best_of_n", "--budgets", "4,8",
                 "-o", f"planner.plan={plan_path}", "--out", str(test)]) == 0
    manifest = json.loads((test / "manifest.json").read_text())
    assert Plan.from_dict(manifest["config"]["options"]["planner"]["plan"]) == plan  # the plan, not a path
    rows = [json.loads(line) for line in (test / "results.jsonl").read_text().splitlines()]
    planner_rows = [r for r in rows if r["strategy"] == "planner"]
    assert len(planner_rows) == 6
    assert all(r["error"] is None and r["ledger"]["flops"] > 0 for r in planner_rows)
    assert all(set(r["report"]) == {"bin", "difficulty", "arm"} for r in planner_rows)  # where it went
    assert not any("report" in r for r in rows if r["strategy"] == "best_of_n")
    capsys.readouterr()
    assert main(["plan", "report", str(test)]) == 0
    out = capsys.readouterr().out
    assert "Per-problem compute of planner" in out and "| 4 | 3 |" in out and "equal compute" in out
    assert "Where planner's compute went" in out
    # the fit refuses the test folder; a missing plan file names the option
    assert main(["plan", "fit", str(test), "--out", str(tmp_path / "bad.json")]) == 2
    assert "validation" in capsys.readouterr().err
    assert main(["bench", *common, "--strategies", "planner", "--budgets", "4", "-o",
                 f"planner.plan={tmp_path / 'missing.json'}", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "-o/--option" in err and "missing.json" in err
    # solve says where the planner put the question (the default plan: a beam probe, five bins)
    assert main(["solve", "--strategy", "planner", "--n", "4",
                 "Start with 12. Multiply by 2. Subtract 5. Add 13. What is the result?"]) == 0
    out = capsys.readouterr().out
    assert "answer: 32" in out and "planner: bin " in out and ", arm " in out
