"""Every shipped recipe parses and resolves to a valid sweep configuration (nothing is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("yaml")

from prmsearch.benchmarks.sweeps.config import SweepConfig
from prmsearch.benchmarks.sweeps.recipes import MODEL_FREE_SCORERS, RecipeError, load_recipe, parse_recipe
from prmsearch.scorers import SCORERS

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))
MINIMAL = {
    "name": "t",
    "policy": {"backend": "vllm", "model": "some/model", "args": {"gpu_memory_utilization": 0.5}},
    "prm": {"backend": "vllm", "family": "qwen-prm", "model": "some/prm"},
    "strategies": {"beam": {"aggregation": "last"}},
    "budgets": [4, 16],
}


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert "qwen25-math-1.5b_qwen-prm-7b_math500.yaml" in names
    assert "llama32-1b_rlhflow-8b_math500.yaml" in names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_resolves_to_a_valid_sweep(path):
    recipe = load_recipe(path)
    assert isinstance(recipe.sweep, SweepConfig)
    assert recipe.sweep.cells()  # every (strategy, budget, seed) builds its strategy config
    assert recipe.policy.model and recipe.prm.family
    assert recipe.prm.model or recipe.prm.family in MODEL_FREE_SCORERS
    assert recipe.sweep.policy_backend == recipe.policy.backend
    assert recipe.sweep.prm_family == recipe.prm.family
    scorer = recipe.prm.scorer_name()  # the family on its backend: a registered scorer name
    assert SCORERS.has(scorer), scorer
    assert scorer == recipe.prm.family if recipe.prm.backend in (None, "hf") else scorer != recipe.prm.family
    assert recipe.sweep.to_dict()["strategies"]  # JSON-ready for the manifest


def test_the_papers_setups():
    qwen = load_recipe(RECIPES[0].parent / "qwen25-math-1.5b_qwen-prm-7b_math500.yaml")
    assert set(qwen.sweep.strategies) == {"beam", "weighted_vote", "particle_filter"}
    assert min(qwen.sweep.budgets) == 4 and max(qwen.sweep.budgets) == 256
    assert qwen.sweep.dataset == "math500"
    shares = qwen.policy.args["gpu_memory_utilization"] + qwen.prm.args["gpu_memory_utilization"]
    assert shares < 1.0  # both engines fit on one GPU
    llama = load_recipe(RECIPES[0].parent / "llama32-1b_rlhflow-8b_math500.yaml")
    assert llama.prm.family == "rlhflow" and llama.prm.backend == "hf"
    assert llama.sweep.strategy_options("beam", 16)["aggregation"] == "last"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": 1}, "unknown keys"),
        ({"policy": {"backend": "tgi", "model": "m"}}, "policy.backend"),
        ({"prm": {"backend": "vllm", "family": "skywork", "model": "m"}}, "use prm.backend: hf"),
        ({"prm": {"backend": "hf", "family": "qwen", "model": "m"}}, "prm.family"),
        ({"policy": {"backend": "vllm", "model": "m", "args": {"gpu_mem": 1}}}, "unknown policy.args"),
        ({"policy": {"backend": "openai", "model": "m"}}, "base_url"),
        ({"prm": {"backend": "vllm-server", "family": "qwen-prm", "model": "m"}}, "prm.args.base_url"),
        ({"prm": {"backend": "vllm-server", "family": "rlhflow", "model": "m",
                  "args": {"base_url": "http://h:1/v1"}}}, "use prm.backend: hf"),
        ({"prm": {"backend": "vllm-server", "family": "qwen-prm", "model": "m",
                  "args": {"base_url": "http://h:1/v1", "gpu_memory_utilization": 0.5}}}, "unknown prm.args"),
        ({"strategies": {"beem": {}}}, "beem"),
        ({"budgets": [0]}, "budgets"),
        ({"dataset": {"name": "nope"}}, "unknown dataset"),
        ({"sampling": {"top_p": 1.5}}, "top_p"),
    ],
)
def test_bad_recipes_name_the_problem(change, message):
    with pytest.raises(RecipeError, match=message):
        parse_recipe({**MINIMAL, **change})


def test_invalid_yaml_is_a_recipe_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(bad)


def test_building_uses_the_registered_backends(monkeypatch):
    from prmsearch.policies.base import POLICIES
    from prmsearch.scorers.base import SCORERS

    made = {}
    monkeypatch.setitem(POLICIES._entries, "vllm", type(POLICIES.entry("arith"))(
        "vllm", lambda **kw: made.setdefault("policy", kw)))
    monkeypatch.setitem(SCORERS._entries, "vllm-qwen-prm", type(SCORERS.entry("arith"))(
        "vllm-qwen-prm", lambda **kw: made.setdefault("prm", kw)))
    recipe = parse_recipe(MINIMAL)
    recipe.build_backends()
    assert made["policy"] == {"model": "some/model", "gpu_memory_utilization": 0.5}
    assert made["prm"] == {"model": "some/prm"}


def test_a_registered_policy_backend_is_accepted():
    from prmsearch import register_policy

    register_policy("test-recipe-backend", lambda **kw: kw, replace=True)
    recipe = parse_recipe({**MINIMAL, "policy": {"backend": "test-recipe-backend", "model": "m"}})
    assert recipe.policy.backend == "test-recipe-backend"
    assert recipe.build_policy() == {"model": "m"}


def test_a_prm_server_recipe_builds_the_vllm_server_scorer(monkeypatch):
    from prmsearch.scorers.base import SCORERS

    made = {}
    monkeypatch.setitem(SCORERS._entries, "vllm-server", type(SCORERS.entry("arith"))(
        "vllm-server", lambda **kw: made.setdefault("prm", kw)))
    args = {"base_url": "http://10.0.0.2:8001/v1", "tokenizer": "some/prm", "max_concurrency": 8}
    recipe = parse_recipe({**MINIMAL, "prm": {"backend": "vllm-server", "family": "qwen-prm",
                                              "model": "served-prm", "args": args}})
    assert recipe.prm.scorer_name() == "vllm-server"
    recipe.build_scorer()
    assert made["prm"] == {"model": "served-prm", "family": "qwen-prm", **args}


def test_a_planner_plan_file_is_read_relative_to_the_recipe(tmp_path):
    from prmsearch.planner.plan import DEFAULT_PLAN, Plan

    (tmp_path / "plans").mkdir()
    plan = {**DEFAULT_PLAN, "edges": [0.5, 0.9, 0.95, 0.99]}
    (tmp_path / "plans" / "val.json").write_text(json.dumps(plan))
    recipe = tmp_path / "planner.yaml"
    models = ("policy: {backend: hf, model: some/policy}\n"
              "prm: {backend: hf, model: some/prm, family: qwen-prm}\n")
    planner = "strategies:\n  planner:\n    plan: plans/val.json\nbudgets: [8]\n"
    recipe.write_text(f"name: planned\n{models}{planner}")
    sweep = load_recipe(recipe).sweep
    assert Plan.from_dict(sweep.options["planner"]["plan"]) == Plan.from_dict(plan)  # the data, not a path
    recipe.write_text(f"name: planned\n{models}strategies:\n  planner:\n    plan: plans/missing.json\n")
    with pytest.raises(RecipeError, match=r"strategies.planner.plan: .*missing.json.*relative to the recipe"):
        load_recipe(recipe)


def test_a_vllm_verifier_recipe_builds_the_vllm_verdict_scorer_and_records_its_backend(monkeypatch):
    """prm.backend decides the scores' dtype and kernels: it is in the manifest (so a resume on
    the other backend is refused), except hf, which older manifests leave out."""
    from prmsearch.scorers.base import SCORERS

    made = {}
    monkeypatch.setitem(SCORERS._entries, "vllm-verifier", type(SCORERS.entry("arith"))(
        "vllm-verifier", lambda **kw: made.setdefault("prm", kw)))
    recipe = parse_recipe({**MINIMAL, "prm": {"backend": "vllm", "family": "verifier", "model": "some/lm",
                                              "args": {"max_model_len": 4096}}})
    assert recipe.prm.scorer_name() == "vllm-verifier"
    recipe.build_scorer()
    assert made["prm"] == {"model": "some/lm", "max_model_len": 4096}
    assert recipe.sweep.to_dict()["prm_backend"] == "vllm"
    on_hf = parse_recipe({**MINIMAL, "prm": {"backend": "hf", "family": "verifier", "model": "some/lm"}})
    assert "prm_backend" not in on_hf.sweep.to_dict()
