"""A strategy owns its budget rule: `bench`, `serve`, `solve` and the API build the same search
for the same strategy and budget (the id ``beam-8`` means one search everywhere)."""

from __future__ import annotations

import argparse

import pytest

from prmsearch.benchmarks.sweeps.config import SweepConfig
from prmsearch.cli.backends import strategy_from_flags
from prmsearch.search.protocol import strategy_names, strategy_spec
from prmsearch.serve.catalog import ModelCatalog
from prmsearch.serve.config import ServeConfig
from prmsearch.serve.requests import parse_completion

BUDGETS = (1, 2, 4, 6, 8, 16, 64)


def _solve_flags(strategy: str, budget: int) -> argparse.Namespace:
    return argparse.Namespace(strategy=strategy, n=budget, option=[])


def _listed_ids() -> list[tuple[str, str, int]]:
    catalog = ModelCatalog("policy", BUDGETS)
    ids = []
    for model in catalog.ids()[1:]:
        name, _, budget = model.rpartition("-")
        ids.append((model, name, int(budget)))
    return ids


@pytest.mark.parametrize(("model", "name", "budget"), _listed_ids())
def test_bench_serve_and_solve_agree_on_every_listed_model_id(model, name, budget):
    if name == "planner":
        pytest.skip("the planner's budgets are its plan's levels (tested with its plan)")
    bench = SweepConfig(strategies=(name,), budgets=(budget,)).strategy_at(name, budget)
    request = parse_completion({"model": model, "prompt": "What is 2+3?"},
                               ModelCatalog("policy", BUDGETS), ServeConfig(budgets=BUDGETS))
    solve = strategy_from_flags(_solve_flags(name, budget))
    assert request.strategy == bench
    assert solve == bench


def test_a_budget_means_the_strategy_rule_and_options_still_win():
    beam = strategy_spec("beam")
    assert beam.at_budget(6).config.width == 2  # gcd(6, 4): every budget is a valid beam
    assert beam.at_budget(16).config.width == 4
    assert beam.at_budget(16, width=2).config.width == 2  # an explicit option wins
    assert beam.at_budget(8, n=3).config.n == 8  # but the budget always decides n
    assert strategy_spec("mcts").at_budget(8).config.expansion_width == 2
    assert strategy_spec("greedy").at_budget(1).config.n == 1
    with pytest.raises(ValueError, match="budget 1 only"):
        strategy_spec("greedy").at_budget(4)


def test_a_sweep_runs_a_fixed_budget_strategy_once_at_its_budget():
    config = SweepConfig(strategies=("greedy", "beam"), budgets=(4, 16))
    assert config.cells() == [("greedy", 1, 0), ("beam", 4, 0), ("beam", 16, 0)]
    fixed = [s for s in strategy_names() if strategy_spec(s).fixed_budget is not None]
    assert fixed == ["greedy"]


def test_serve_and_bench_agree_with_server_options_on_top():
    catalog = ModelCatalog("policy", (8,), defaults={"beam": {"width": 2}})
    body = {"model": "beam-8", "prompt": "What is 2+3?"}
    request = parse_completion(body, catalog, ServeConfig(budgets=(8,)))
    bench = SweepConfig(strategies=("beam",), budgets=(8,), options={"beam": {"width": 2}})
    assert request.strategy == bench.strategy_at("beam", 8)
    assert request.strategy.config.width == 2
