"""`prmsearch export` on real trees of the embedded models: SFT, preference and stepwise rows,
graded against gold or the PRM vote, bad inputs left out by name, and datasets that load."""

from __future__ import annotations

import gzip
import json
import math
import shutil

import pytest

from prmsearch import cli
from prmsearch.answers import extract_answer
from prmsearch.benchmarks.grading import is_equivalent
from prmsearch.export import ExportConfig, build_rows, export_dataset, scorer_checker
from prmsearch.export.problems import problem_from_graph
from prmsearch.export.values import tree_values
from prmsearch.tree_graph import read_tree_graph, write_tree_graph

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A bench run of the embedded models with its trees: beam and best-of-n at 8, 4 train problems."""
    out = tmp_path_factory.mktemp("export") / "run"
    flags = ["bench", "--dataset", "arith", "--split", "train", "--limit", "4", "--strategies",
             "beam,best_of_n", "--budgets", "8", "--save-trees", "--no-progress", "--threads", "1",
             "--out", str(out)]  # fmt: skip
    assert cli.main(flags) == 0
    return out


def _trees(run):
    return sorted((run / "trees").rglob("*.json.gz"))


def _answer(text: str) -> str | None:
    return extract_answer(text)


def test_sft_rows_are_the_right_paths_of_the_trees(run):
    report = build_rows([run], ExportConfig(kind="sft"))
    assert report.problems_read == 8 and not report.errors
    assert report.rows, "the embedded policy solves some of these problems"
    for row in report.rows:
        assert row["prompt"].endswith("?\n\n") and "\n\n" in row["completion"]
        assert row["correct"] is True and row["reference_kind"] == "gold"
        assert is_equivalent(_answer(row["completion"]), row["reference"])
    by_problem = {}
    for row in report.rows:
        by_problem.setdefault((row["source"]), set()).add(row["completion"])
    assert all(len(texts) >= 1 for texts in by_problem.values())
    best = build_rows([run], ExportConfig(kind="sft", paths="best-correct")).rows
    assert len(best) == report.problems_with_rows  # one per problem that has a right path
    chosen = build_rows([run], ExportConfig(kind="sft", paths="chosen")).rows
    for row in chosen:  # the search's own answer, kept only where it is right
        graph = read_tree_graph(row["source"])["graph"]
        assert graph["correct"] is True and _answer(row["completion"]) == graph["answer"]


def test_preference_pairs_prefer_right_paths_and_better_steps(run):
    rows = build_rows([run], ExportConfig(kind="preference")).rows
    solution = [r for r in rows if r["pair"] == "solution"]
    step = [r for r in rows if r["pair"] == "step"]
    assert solution and step
    for row in solution:
        assert is_equivalent(_answer(row["chosen"]), row["reference"])
        assert not is_equivalent(_answer(row["rejected"]), row["reference"])
        assert row["margin"] == 1.0
    for row in step:  # each side runs from its step to the end of a finished path (TRL adds EOS)
        assert row["chosen_step"] != row["rejected_step"]
        assert row["chosen"].startswith(row["chosen_step"])
        assert row["rejected"].startswith(row["rejected_step"])
        assert _answer(row["chosen"]) is not None and row["prompt"].endswith("\n\n")
        assert (
            row["chosen_score"] - row["rejected_score"] == pytest.approx(row["margin"]) and row["margin"] > 0
        )
        assert row["prompt"].count("\n\n") == row["depth"] + 1  # the question, then each step of the prefix
    only_steps = build_rows([run], ExportConfig(kind="preference", pairs="step")).rows
    assert len(only_steps) >= len(step)  # "both" writes a root pair equal to a solution pair once
    cut = max(r["margin"] for r in only_steps)
    strict = build_rows([run], ExportConfig(kind="preference", pairs="step", min_margin=cut)).rows
    assert strict and len(strict) == sum(r["margin"] >= cut for r in only_steps)
    assert not build_rows([run], ExportConfig(kind="preference", pairs="step", min_margin=cut + 1e-9)).rows
    capped = build_rows([run], ExportConfig(kind="preference", max_pairs=1)).rows
    problems = [r["source"] for r in capped]
    assert len(problems) == len(set(problems))  # at most one pair per problem


def test_stepwise_labels_from_prm_mc_and_the_checker(run):
    prm = build_rows([run], ExportConfig(kind="stepwise", paths="all", threshold=0.5)).rows
    assert prm
    for row in prm:
        assert len(row["labels"]) == len(row["completions"]) and all(
            isinstance(v, bool) for v in row["labels"]
        )
    graph = read_tree_graph(prm[0]["source"])
    scores = {n["step_text"]: n["score"] for n in graph["nodes"]}
    assert prm[0]["labels"][0] == (scores[prm[0]["completions"][0]] >= 0.5)
    mc = build_rows([run], ExportConfig(kind="stepwise", paths="all", step_labels="mc")).rows
    for row in mc:  # a right path is right at every step: each of its nodes has a right path below
        if row["correct"]:
            assert all(row["labels"])
    checker = scorer_checker("arith-oracle")
    checked = build_rows([run], ExportConfig(kind="stepwise", paths="all", step_labels="checker"),
                         checker=checker).rows  # fmt: skip
    for row in checked:
        if not row["correct"]:
            assert not all(row["labels"])  # a wrong answer has a wrong step the checker finds
        assert row["labels"] == [s >= 0.5 for s in checker(row["prompt"], row["completions"])]


def test_without_gold_the_prm_vote_grades_the_paths(run, tmp_path):
    folder = tmp_path / "trees"
    for path in _trees(run):
        graph = read_tree_graph(path)
        graph["graph"].pop("gold")
        write_tree_graph(graph, folder / path.parent.name / path.parent.parent.name / path.name)
    rows = build_rows([folder], ExportConfig(kind="sft")).rows
    assert rows and {r["reference_kind"] for r in rows} == {"vote"}
    tree = problem_from_graph(read_tree_graph(sorted(folder.rglob("*.json.gz"))[0]), "t")
    values = tree_values(tree, "min", "vote", is_equivalent)
    assert values.reference_kind == "vote"
    voted = [t for t in tree.terminals() if values.correct.get(t)]
    assert voted and all(is_equivalent(tree.nodes[t].answer, values.reference) for t in voted)
    assert build_rows([folder], ExportConfig(kind="sft", reference="gold")).skipped["without_gold"] == 8
    ranked = build_rows([folder], ExportConfig(kind="preference", reference="score", pairs="solution")).rows
    assert ranked
    for row in ranked:
        assert row["margin"] >= 0 and math.isclose(row["margin"], row["chosen_score"] - row["rejected_score"])


def test_bad_inputs_are_named_and_the_rest_is_exported(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    trees = _trees(copy)
    torn = trees[0]
    torn.write_bytes(torn.read_bytes()[:200])  # half-written
    moved = trees[1]
    moved.write_bytes(trees[2].read_bytes())  # the tree of another problem under this name
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.jsonl").write_text("{}\n")
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps({"hello": 1}))
    report = export_dataset(
        [copy, bare, junk, tmp_path / "missing"], ExportConfig(kind="sft"), tmp_path / "out"
    )
    text = [str(e) for e in report.errors]
    assert any(str(torn) in t and "damaged" in t for t in text)
    assert any(str(moved) in t and "another problem" not in t and "of problem" in t for t in text)
    assert any(str(bare) in t and "--save-trees" in t for t in text)
    assert any(str(junk) in t and "not node-link data of a tree" in t for t in text)
    assert any("missing" in t and "does not exist" in t for t in text)
    assert report.problems_read == 6  # the other trees were exported
    card = json.loads((tmp_path / "out" / "export.json").read_text())
    assert card["counts"]["inputs_left_out"] == 5 and len(card["errors"]) == 5
    with pytest.raises(ValueError, match="nothing to export"):
        export_dataset([bare], ExportConfig(kind="sft"), tmp_path / "none")


def test_stripped_label_runs_say_how_to_restore_them(tmp_path):
    row = {"problem_id": "gsm8k-train/1", "prompt": None, "completions": ["a", "b"], "gold": "2",
           "answer": "2", "answer_correct": True, "labels": [True, True], "status": "labelled"}  # fmt: skip
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps(row) + "\n" + '{"problem_id": "gsm8k-tr')
    report = build_rows([tmp_path], ExportConfig(kind="stepwise", paths="all", step_labels="source"))
    text = " ".join(str(e) for e in report.errors)
    assert "label_questions.py restore" in text and "labels.jsonl:2" in text
    path.write_text(json.dumps({**row, "prompt": "What is 1+1?"}) + "\n")
    rows = build_rows([path], ExportConfig(kind="stepwise", paths="all", step_labels="source")).rows
    assert rows == [
        {**rows[0], "prompt": "What is 1+1?", "completions": ["a", "b"], "labels": [True, True]}
    ]


def test_cli_writes_datasets_that_load(run, tmp_path, capsys):
    out = tmp_path / "pairs"
    flags = ["export", str(run), "--kind", "preference", "--out", str(out), "--format", "jsonl,disk,parquet",
             "--strategy", "beam"]  # fmt: skip
    assert cli.main(flags) == 0
    assert "preference rows" in capsys.readouterr().out
    disk = datasets.load_from_disk(str(out / "dataset"))
    parquet = datasets.load_dataset("parquet", data_files=str(out / "data.parquet"))["train"]
    lines = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert len(disk) == len(parquet) == len(lines) > 0
    assert {"prompt", "chosen", "rejected", "margin"} <= set(disk.column_names)
    card = json.loads((out / "export.json").read_text())
    assert card["strategy"] == ["beam"] and card["budget"] == [8] and "--strategy beam" in card["command"]
    assert "load_from_disk" in (out / "README.md").read_text()
    chat = tmp_path / "chat"
    assert cli.main(["export", str(run), "--kind", "sft", "--style", "messages", "--out", str(chat)]) == 0
    first = json.loads((chat / "data.jsonl").read_text().splitlines()[0])
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert cli.main(["export", str(run), "--kind", "stepwise", "--style", "chat", "--out", str(chat)]) == 2
    assert "--style" in capsys.readouterr().err
    assert (
        cli.main(["export", str(run), "--kind", "stepwise", "--step-labels", "checker", "--out", str(chat)])
        == 2
    )
    assert "--checker" in capsys.readouterr().err


def test_a_gzip_tree_torn_anywhere_is_reported(run, tmp_path):
    path = _trees(run)[0]
    raw = gzip.decompress(path.read_bytes())
    broken = tmp_path / "t.json.gz"
    broken.write_bytes(gzip.compress(raw[: len(raw) // 2]))
    report = build_rows([broken], ExportConfig(kind="sft"))
    assert report.problems_read == 0 and "damaged" in str(report.errors[0])


# ------------------------------------------------------------------ train-policy: TRL on the export


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported")
    assert cli.main(["export", str(run), "--kind", "sft", "--out", str(folder / "sft")]) == 0
    assert cli.main(["export", str(run), "--kind", "preference", "--out", str(folder / "pairs")]) == 0
    return folder


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_trl_trains_the_embedded_policy_on_the_export_unchanged(exported, tmp_path, capsys, method):
    pytest.importorskip("trl")
    data = exported / ("sft" if method == "sft" else "pairs")
    out = tmp_path / "policy"
    flags = [
        "train-policy",
        str(data),
        "--method",
        method,
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--out",
        str(out),
    ]
    assert cli.main(flags) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out.splitlines()[0])
    assert "train-policy: step 2/2 loss" in captured.err and "min left)" in captured.err  # progress
    assert printed["steps"] == 2 and printed["rows"] > 0 and math.isfinite(printed["last_loss"])
    settings = json.loads((out / "prmsearch.json").read_text())
    assert settings["prompt_format"] == "plain" and settings["trained_with"]["config"]["method"] == method
    # the folder is a policy: a search runs with it
    assert cli.main(["solve", "Start with 3. Add 4. What is the result?", "--policy", str(out),
                     "--strategy", "greedy"]) == 0  # fmt: skip
    assert "boxed" in capsys.readouterr().out


def test_train_policy_names_missing_columns(exported, tmp_path, capsys):
    assert (
        cli.main(["train-policy", str(exported / "sft"), "--method", "dpo", "--out", str(tmp_path / "p")])
        == 2
    )
    err = capsys.readouterr().err
    assert "chosen+rejected" in err and "--kind preference" in err
    assert cli.main(["train-policy", str(tmp_path / "none"), "--out", str(tmp_path / "p")]) == 2
    assert (
        cli.main(["train-policy", str(exported / "sft"), "--steps", "0", "--out", str(tmp_path / "p")]) == 2
    )
    assert "--steps" in capsys.readouterr().err


def test_stepwise_export_trains_a_prm_with_train_prm(run, tmp_path, capsys):
    """TRL dropped its PRM trainer; the stepwise export feeds prmsearch's own train-prm unchanged."""
    data = tmp_path / "stepwise"
    assert cli.main(["export", str(run), "--kind", "stepwise", "--step-labels", "checker", "--checker",
                     "arith-oracle", "--out", str(data)]) == 0  # fmt: skip
    prm = tmp_path / "prm"
    flags = ["train-prm", "--data", str(data / "data.jsonl"), "--out", str(prm), "--steps", "2",
             "--batch-size", "4", "--warmup", "1", "--threads", "1", "--quiet", "--validation-fraction", "0"]
    assert cli.main(flags) == 0
    assert (prm / "config.json").is_file()
