"""``bench --recipe``: sweep flags on the command line replace the recipe's values, and flags that
would change its models or dataset are refused; none is silently ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prmsearch.cli import build_parser, main, recipe_overrides

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "src" / "prmsearch" / "arith" / "models"

RECIPE = f"""\
name: tiny
policy: {{backend: hf, model: {MODELS / 'policy'}}}
prm: {{backend: hf, family: qwen-prm, model: {MODELS / 'prm'}}}
sampling: {{temperature: 0.8, max_step_tokens: 48}}
search: {{max_depth: 12, chunk: 8}}
dataset: {{name: arith, split: test, limit: 50}}
strategies:
  beam: {{aggregation: last}}
  best_of_n: {{}}
budgets: [4, 16]
seeds: [0, 1]
"""


@pytest.fixture()
def recipe(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(RECIPE)
    return path


def _overrides(recipe: Path, *flags: str) -> dict:
    from prmsearch.benchmarks.sweeps.recipes import load_recipe

    args = build_parser().parse_args(["bench", "--recipe", str(recipe), *flags])
    return recipe_overrides(args, load_recipe(recipe).sweep)


def test_no_flags_keep_the_recipe(recipe):
    # the operational flags always pass through
    assert _overrides(recipe) == {"max_consecutive_failures": 8, "overlap": 1, "schedule": "auto"}


def test_sweep_flags_replace_the_recipe_values(recipe):
    got = _overrides(
        recipe, "--budgets", "4", "--seeds", "3", "--limit", "2", "--chunk", "2", "--max-depth", "5",
        "--temperature", "0.5", "--delimiter", "\\n", "--split", "validation", "--no-share-bon-samples",
    )
    assert got["budgets"] == (4,) and got["seeds"] == (3,) and got["limit"] == 2
    assert got["chunk"] == 2 and got["max_depth"] == 5 and got["temperature"] == 0.5
    assert got["delimiter"] == "\n" and got["split"] == "validation" and got["share_bon_samples"] is False


def test_strategies_keep_their_recipe_options_and_options_merge(recipe):
    got = _overrides(recipe, "--strategies", "beam", "-o", "beam.width=2")
    assert got["strategies"] == ("beam",)
    assert got["options"] == {"beam": {"aggregation": "last", "width": 2}}
    only_option = _overrides(recipe, "-o", "best_of_n.selection=weighted")
    assert only_option["strategies"] == ("beam", "best_of_n")
    assert only_option["options"]["best_of_n"] == {"selection": "weighted"}


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--policy", "x"], "--policy 'x'"),
        (["--prm", "y", "--prm-family", "qwen-prm"], "--prm 'y'"),
        (["--prm-backend", "vllm"], "--prm-backend 'vllm'"),
        (["--dataset", "math500"], "--dataset 'math500'"),
        (["--top-p", "2"], "--top-p 2.0"),
        (["-o", "beam.width=8"], "-o/--option"),  # beam's width 8 needs n >= 8; the recipe has 4
        (["-o", "beam.widht=2"], "-o/--option"),
        (["-o", "dvts.width=2"], "-o/--option"),
        (["--strategies", "beem"], "--strategies 'beem'"),
    ],
)
def test_flags_a_recipe_cannot_take_are_one_line_errors(recipe, tmp_path, capsys, flags, named):
    out = tmp_path / "never"
    assert main(["bench", "--recipe", str(recipe), "--out", str(out), *flags]) == 2
    assert not out.exists()  # refused before anything runs
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_recipe_run_uses_the_flags(recipe, tmp_path):
    """End to end on the embedded models: the manifest and the rows carry the flags' values."""
    out = tmp_path / "run"
    code = main(["bench", "--recipe", str(recipe), "--out", str(out), "--budgets", "4",
                 "--seeds", "0", "--limit", "2", "--strategies", "best_of_n", "--no-progress"])
    assert code == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["strategy"], r["budget"], r["seed"]) for r in rows} == {("best_of_n", 4, 0)}
    assert len(rows) == 2
