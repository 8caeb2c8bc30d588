"""Tree export: a real search's tree as node-link data and a networkx DiGraph, its files (node-link
JSON, gzip, GraphML) read back by networkx, NaN kept, ``solve --tree FILE`` and ``bench
--save-trees`` (written with each row; a killed run resumes without losing or duplicating one)."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys

import pytest
from helpers import synthetic_backends
from tree_helpers import QUESTION, synthetic_tree

from prmsearch import Searcher, aggregate_scores, resolve_policy, resolve_scorer
from prmsearch.answers import AnswerMatcher, canonical_answer
from prmsearch.benchmarks.sweeps.results import ResultsFolder
from prmsearch.benchmarks.sweeps.sweep import SweepConfig, SweepProblem, run_sweep
from prmsearch.benchmarks.sweeps.trees import TreesFolder, file_name
from prmsearch.cli import main
from prmsearch.tree_graph import (
    FLOAT_ATTRIBUTES,
    NODE_ATTRIBUTES,
    read_tree_graph,
    result_graph,
    tree_graph,
    write_tree_graph,
)

nx = pytest.importorskip("networkx", reason="the [viz] extra (networkx) exports trees as graphs")


@pytest.fixture(scope="module")
def embedded():
    """The embedded policy and PRM, loaded once for the module."""
    return resolve_policy(None), resolve_scorer(None)


@pytest.fixture(scope="module")
def beam_result(embedded):
    return Searcher(*embedded, "beam", n=16)(QUESTION)


@pytest.fixture(scope="module")
def mcts_result(embedded):
    return Searcher(*embedded, "mcts", n=16)(QUESTION)


def same(a, b) -> bool:
    """Equal, with NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_export_of_a_real_search_has_every_node_and_attribute(beam_result):
    result, tree = beam_result, beam_result.tree
    graph = result.to_networkx()
    assert isinstance(graph, nx.DiGraph)
    assert graph.number_of_nodes() == len(tree) and graph.number_of_edges() == len(tree) - 1
    assert sorted(graph.edges) == sorted((tree.parent[i], i) for i in range(1, len(tree)))
    assert graph.graph["question"] == QUESTION and graph.graph["strategy"] == "beam"
    assert graph.graph["answer"] == result.answer == "47" and graph.graph["chosen"] == result.node
    assert graph.graph["score"] == result.score and graph.graph["ledger"]["generations"] == 48
    for i in tree.iter_nodes():
        node = graph.nodes[i]
        assert set(node) == set(NODE_ATTRIBUTES)
        assert node["step_text"] == tree.step_text[i] and node["depth"] == tree.depth[i]
        assert node["token_ids"] == list(tree.token_ids[i]) and node["token_count"] == len(tree.token_ids[i])
        assert node["logprob"] == tree.logprob[i] and same(node["score"], tree.score[i])
        assert node["terminal"] == tree.terminal[i] and node["truncated"] == tree.truncated[i]
        assert node["finish"] == tree.finish[i] and node["answer"] == tree.answer[i]
        steps = tree.step_scores(i)
        for name in ("min", "mean", "prod", "last"):
            expected = aggregate_scores(steps, name) if i else math.nan
            assert same(node[f"path_{name}"], expected) or math.isclose(node[f"path_{name}"], expected)
    assert graph.nodes[0]["step_text"] == "" and math.isnan(graph.nodes[0]["score"])


def test_chosen_path_and_pruned_leaves(beam_result):
    result, tree = beam_result, beam_result.tree
    graph = result.to_networkx()
    chosen = [i for i, d in graph.nodes(data=True) if d["chosen"]]
    assert chosen == [0, *tree.path(result.node)]  # the root and every step of the chosen path
    assert len(chosen) == tree.depth[result.node] + 1
    assert [graph.nodes[i]["step_text"] for i in chosen[1:]] == list(result.steps)
    pruned = {i for i, d in graph.nodes(data=True) if d["pruned"]}
    assert pruned == {i for i in tree.leaves() if not tree.terminal[i]}
    assert pruned, "beam search drops paths: some leaves were never expanded"
    assert not any(graph.nodes[i]["pruned"] for i in chosen)


def test_mcts_visits_and_value(mcts_result):
    tree = mcts_result.tree
    data = tree_graph(tree, mcts_result.node)
    visited = [n for n in data["nodes"] if n["visits"]]
    assert visited, "MCTS visits nodes"
    for node in data["nodes"]:
        i = node["id"]
        assert node["visits"] == tree.visits[i] and node["value_sum"] == tree.value_sum[i]
        if tree.visits[i]:
            assert math.isclose(node["value"], tree.value_sum[i] / tree.visits[i])
        else:
            assert math.isnan(node["value"])
    assert tree.to_networkx(mcts_result.node).number_of_nodes() == len(tree)  # the tree's own method


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_node_link_files_round_trip_through_networkx_with_nan(tmp_path, beam_result, suffix):
    data = result_graph(beam_result)
    path = write_tree_graph(data, tmp_path / f"tree{suffix}")
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if suffix == ".json.gz" else raw.decode()

    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    loaded = json.loads(text, parse_constant=refuse)  # strict JSON: no NaN token
    assert loaded["nodes"][0]["score"] is None  # NaN is written as null
    graph = nx.node_link_graph(loaded, directed=True, multigraph=False, edges="edges")  # networkx's reader
    assert graph.number_of_nodes() == len(beam_result.tree)
    assert sorted(graph.edges) == sorted(nx.node_link_graph(data, edges="edges").edges)
    assert graph.graph["chosen"] == beam_result.node and graph.nodes[0]["score"] is None
    back = read_tree_graph(path)  # ours: null floats become NaN again
    assert back["graph"] == json.loads(json.dumps(data["graph"]))
    for before, after in zip(data["nodes"], back["nodes"], strict=True):
        assert before.keys() == after.keys()
        assert all(same(before[k], after[k]) for k in before), before["id"]
    assert all(math.isnan(back["nodes"][0][k]) for k in ("score", "path_min", "value"))


def test_graphml_round_trip_keeps_nan_and_types(tmp_path, mcts_result):
    path = write_tree_graph(result_graph(mcts_result), tmp_path / "tree.graphml")
    graph = nx.read_graphml(path, node_type=int)
    tree = mcts_result.tree
    assert graph.number_of_nodes() == len(tree) and graph.number_of_edges() == len(tree) - 1
    root = graph.nodes[0]
    assert math.isnan(root["score"]) and math.isnan(root["path_min"])  # NaN survives as a double
    assert root["answer"] == "" and root["chosen"] is True  # no null in GraphML: "" for None
    for i in tree.iter_nodes():
        node = graph.nodes[i]
        assert node["token_ids"] == " ".join(map(str, tree.token_ids[i]))
        assert node["terminal"] is tree.terminal[i] and node["visits"] == tree.visits[i]
        assert all(isinstance(node[name], float) for name in FLOAT_ATTRIBUTES)
    assert json.loads(graph.graph["ledger"])["generations"] == mcts_result.ledger.generations
    assert graph.graph["question"] == QUESTION and graph.graph["chosen"] == mcts_result.node


def test_unknown_suffix_is_refused_naming_the_known_ones(tmp_path, beam_result):
    with pytest.raises(ValueError, match=r"\.json, \.json\.gz, \.graphml"):
        write_tree_graph(result_graph(beam_result), tmp_path / "tree.txt")
    assert not list(tmp_path.iterdir())


def test_large_tree_exports_with_unscored_nodes(tmp_path):
    tree, chosen = synthetic_tree(3000)
    data = tree_graph(tree, chosen)
    assert len(data["nodes"]) == 3000 and sum(n["chosen"] for n in data["nodes"]) == tree.depth[chosen] + 1
    unscored = [n for n in data["nodes"] if n["id"] and math.isnan(n["score"])]
    assert unscored and all(math.isnan(n["path_mean"]) for n in unscored)
    back = read_tree_graph(write_tree_graph(data, tmp_path / "big.json.gz"))
    assert all(same(a["score"], b["score"]) for a, b in zip(data["nodes"], back["nodes"], strict=True))


def test_importing_prmsearch_never_imports_networkx():
    code = "import sys, prmsearch, prmsearch.tree_graph, prmsearch.viewer; print('networkx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------- solve --tree


@pytest.mark.parametrize("name", ["tree.json", "tree.json.gz", "tree.graphml"])
def test_solve_tree_writes_the_file_its_suffix_names(tmp_path, capsys, name):
    path = tmp_path / name
    assert main(["solve", QUESTION, "--n", "8", "--tree", str(path)]) == 0
    assert "answer: 47" in capsys.readouterr().out
    if name.endswith(".graphml"):
        graph = nx.read_graphml(path, node_type=int)
    else:
        graph = nx.node_link_graph(read_tree_graph(path), edges="edges")
    assert graph.graph["question"] == QUESTION and graph.graph["strategy"] == "beam"
    chosen = [i for i, d in graph.nodes(data=True) if d["chosen"]]
    assert chosen[-1] == graph.graph["chosen"] and graph.nodes[chosen[-1]]["terminal"]


def test_solve_bare_tree_with_json_puts_the_tree_in_the_output(capsys):
    assert main(["solve", QUESTION, "--n", "4", "--json", "--tree"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["tree"]["parent"]) == data["nodes"]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--tree", "tree.txt"], "--tree 'tree.txt'"),
        (["--tree"], "--tree: without a FILE"),
    ],
)
def test_solve_tree_errors_are_one_line_naming_the_flag(capsys, flags, named):
    assert main(["solve", QUESTION, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err


# ---------------------------------------------------------------------------- bench --save-trees

PROBLEMS = [SweepProblem(f"p{i}", f"problem {i}", str(i % 4)) for i in range(5)] + [
    SweepProblem("odd/id ?", "problem odd", "1")
]
CONFIG = SweepConfig(strategies=("greedy", "beam", "best_of_n", "self_consistency"), budgets=(1, 4),
                     seeds=(0,), share_bon_samples=True, save_trees=True)


def grade(answer, gold):
    return answer is not None and canonical_answer(answer) == canonical_answer(gold)


def sweep(out, config=CONFIG, **kw):
    policy, scorer = synthetic_backends(depth=2)
    return run_sweep(config, PROBLEMS, out, policy=policy, scorer=scorer, grade=grade,
                     matcher=AnswerMatcher(), progress=False, **kw)


def tree_files(out):
    return sorted(p.relative_to(out) for p in (out / "trees").rglob("*") if p.is_file())


def test_save_trees_writes_one_tree_per_searched_row(tmp_path):
    folder = sweep(tmp_path / "run")
    rows = list(folder.rows())
    searched = [r for r in rows if "derived_from" not in r]
    assert len(rows) > len(searched) > 0  # self_consistency rows are re-selected from best_of_n's
    trees = TreesFolder.of_run(folder.path)
    keys = {(r["qid"], r["strategy"], r["budget"], r["seed"]) for r in searched}
    assert set(trees.saved()) == keys and len(tree_files(folder.path)) == len(keys)
    for row in searched:
        data = trees.read((row["qid"], row["strategy"], row["budget"], row["seed"]))
        meta = data["graph"]
        assert (meta["qid"], meta["strategy"], meta["budget"], meta["seed"]) == (
            row["qid"], row["strategy"], row["budget"], row["seed"])
        assert (meta["answer"], meta["gold"], meta["correct"]) == (row["answer"], row["gold"], row["correct"])
        chosen = [n for n in data["nodes"] if n["chosen"]][1:]
        assert [n["step_text"] for n in chosen] == row["steps"]
    assert (folder.path / "trees" / "beam" / "n4-s0" / f"{file_name('odd/id ?')}.json.gz").is_file()
    manifest = json.loads((folder.path / "manifest.json").read_text())
    assert "save_trees" not in manifest["config"]  # operational: not part of the run's identity


def test_killed_run_resumes_without_losing_or_duplicating_trees(tmp_path):
    out = tmp_path / "run"
    full = sweep(out)
    expected = tree_files(out)
    lines = full.results_path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if "derived_from" not in line][:7]
    # killed: the next problem's tree was written, its row torn mid-write; later trees never written
    victims = [json.loads(line) for line in lines if "derived_from" not in line][7:]
    trees = TreesFolder.of_run(out)
    for row in victims[1:]:
        trees.tree_path((row["qid"], row["strategy"], row["budget"], row["seed"])).unlink()
    full.results_path.write_text("".join(kept) + json.dumps(victims[0])[:30])
    assert len(tree_files(out)) == 8  # 7 trees with rows, 1 tree whose row was lost
    resumed = sweep(out, resume=True)
    rows = list(resumed.rows())
    keys = [(r["qid"], r["strategy"], r["budget"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(lines)
    assert tree_files(out) == expected  # every searched row has exactly its one tree
    for row in rows:
        if "derived_from" not in row:
            meta = trees.read((row["qid"], row["strategy"], row["budget"], row["seed"]))["graph"]
            assert meta["answer"] == row["answer"]
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*.tmp"))


def test_resume_may_turn_save_trees_on_without_another_identity(tmp_path):
    out = tmp_path / "run"
    plain = SweepConfig(strategies=("beam",), budgets=(4,), seeds=(0,))
    folder = sweep(out, config=plain)
    lines = folder.results_path.read_text().splitlines(keepends=True)
    folder.results_path.write_text("".join(lines[:3]))
    resumed = sweep(out, config=SweepConfig(strategies=("beam",), budgets=(4,), seeds=(0,), save_trees=True),
                    resume=True)
    assert len(list(resumed.rows())) == len(PROBLEMS)
    assert len(tree_files(out)) == len(PROBLEMS) - 3  # the trees of the problems this run searched


def test_save_trees_is_refused_with_a_runner(tmp_path):
    with pytest.raises(ValueError, match="save_trees"):
        sweep(tmp_path / "run", runner=object())
    with pytest.raises(ValueError, match="save_trees must be True or False"):
        SweepConfig(save_trees="yes")


def test_bench_cli_save_trees_on_the_embedded_models(tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["bench", "--strategies", "beam", "--budgets", "4", "--limit", "2", "--out", str(out),
             "--no-progress", "--save-trees"]
    assert main(flags) == 0
    rows = list(ResultsFolder(out).rows())
    assert len(rows) == 2 and len(tree_files(out)) == 2
    data = TreesFolder.of_run(out).read((rows[0]["qid"], "beam", 4, 0))
    assert data["graph"]["question"] and data["graph"]["answer"] == rows[0]["answer"]
    capsys.readouterr()
    assert main([*flags, "--resume"]) == 0  # nothing left to run: nothing written twice
    assert len(tree_files(out)) == 2
    assert main(["bench", "--save-trees", "--ray"]) == 2
    assert "--save-trees" in capsys.readouterr().err
