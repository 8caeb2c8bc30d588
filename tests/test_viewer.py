"""The viewer's HTML: one self-contained page (nothing fetched from a network) with the tree's data
embedded, and ``prmsearch view`` for a tree file, a bench run's problem and a question."""

from __future__ import annotations

import json
import re

import pytest
from helpers import synthetic_backends
from tree_helpers import QUESTION, synthetic_tree

from prmsearch.answers import AnswerMatcher
from prmsearch.benchmarks.sweeps.sweep import SweepConfig, SweepProblem, run_sweep
from prmsearch.cli import main
from prmsearch.tree_graph import tree_graph, write_tree_graph
from prmsearch.viewer import page_data, render_html

_DATA = re.compile(r'<script type="application/json" id="tree-data">(.*?)</script>', re.DOTALL)


def embedded_data(page: str) -> dict:
    match = _DATA.search(page)
    assert match, "the tree data block is missing"
    return json.loads(match.group(1))


def assert_self_contained(page: str) -> None:
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert not re.search(r"<link[^>]+stylesheet", page, re.IGNORECASE)
    assert not re.search(r"<script[^>]+src=", page, re.IGNORECASE)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page)
    assert "<style>" in page and "/*__" not in page and "__DATA__" not in page


def test_page_is_self_contained_and_embeds_the_tree():
    tree, chosen = synthetic_tree(200)
    graph = tree_graph(tree, chosen, strategy="beam", answer="3")
    page = render_html(graph)
    assert_self_contained(page)
    data = embedded_data(page)
    assert data == page_data(graph)
    assert data["meta"]["question"] == tree.question and data["meta"]["chosen"] == chosen
    assert data["nodes"]["step_text"] == tree.step_text and data["nodes"]["parent"] == tree.parent
    assert sum(data["nodes"]["chosen"]) == tree.depth[chosen] + 1
    assert data["nodes"]["score"][0] is None  # NaN as null


def test_step_text_cannot_break_out_of_the_page():
    tree, chosen = synthetic_tree(20)
    tree.step_text[3] = "</script><script>alert('x')</script> <!-- & -->"
    page = render_html(tree_graph(tree, chosen))
    assert "<script>alert" not in page and page.count("</script>") == 2
    assert embedded_data(page)["nodes"]["step_text"][3] == tree.step_text[3]


def test_a_3000_node_tree_makes_a_compact_page():
    tree, chosen = synthetic_tree(3000)
    page = render_html(tree_graph(tree, chosen))
    assert len(embedded_data(page)["nodes"]["parent"]) == 3000
    assert len(page) < 1_500_000


def test_page_data_refuses_what_is_not_a_tree():
    with pytest.raises(ValueError, match="node ids"):
        page_data({"graph": {}, "nodes": [{"id": 5}], "edges": []})
    with pytest.raises(ValueError, match="lack"):
        page_data({"graph": {}, "nodes": [{"id": 0, "parent": -1}], "edges": []})


# ---------------------------------------------------------------------------- prmsearch view


def test_view_a_tree_file(tmp_path, capsys):
    tree, chosen = synthetic_tree(50)
    source = write_tree_graph(tree_graph(tree, chosen), tmp_path / "t.json.gz")
    assert main(["view", str(source)]) == 0
    out = tmp_path / "t.html"
    assert capsys.readouterr().out.strip() == str(out)
    assert embedded_data(out.read_text())["meta"]["nodes"] == 50
    assert main(["view", str(source), "--out", str(tmp_path / "x" / "y.html")]) == 0
    assert (tmp_path / "x" / "y.html").is_file()


def test_view_a_question(tmp_path):
    out = tmp_path / "q.html"
    assert main(["view", "--question", QUESTION, "--strategy", "mcts", "--n", "8", "--out", str(out)]) == 0
    page = out.read_text()
    assert_self_contained(page)
    meta = embedded_data(page)["meta"]
    assert meta["strategy"] == "mcts" and meta["answer"] and meta["ledger"]["generations"] > 0


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run"
    policy, scorer = synthetic_backends(depth=2)
    config = SweepConfig(strategies=("beam", "best_of_n"), budgets=(2, 4), save_trees=True)
    problems = [SweepProblem(f"p{i}", f"problem {i}", str(i)) for i in range(3)]
    run_sweep(config, problems, out, policy=policy, scorer=scorer, matcher=AnswerMatcher(), progress=False,
              grade=lambda a, g: a == g)
    return out


def test_view_one_problem_of_a_bench_run(run_folder, tmp_path):
    out = tmp_path / "p1.html"
    flags = ["view", str(run_folder), "--problem", "p1", "--strategy", "beam", "--budget", "4",
             "--out", str(out)]
    assert main(flags) == 0
    meta = embedded_data(out.read_text())["meta"]
    assert (meta["qid"], meta["strategy"], meta["budget"], meta["seed"]) == ("p1", "beam", 4, 0)
    assert "gold" in meta and "correct" in meta


@pytest.mark.parametrize(
    "flags, named",
    [
        ([], "SOURCE:"),
        (["{run}"], "--problem: which problem"),
        (["{run}", "--problem", "p1"], "--strategy: problem 'p1' has 4 trees"),
        (["{run}", "--problem", "nope"], "--problem 'nope': no tree saved"),
        (["{run}", "--problem", "p1", "--strategy", "dvts"], "--strategy 'dvts': no tree of problem"),
        (["{run}", "--problem", "p1", "--n", "4"], "--n 4"),
        (["{tmp}"], "holds no trees/"),
        (["{tmp}/missing.json"], "SOURCE '"),
        (["{tmp}/t.txt"], "must end in one of"),
        (["{tmp}/other.json"], "not a prmsearch tree"),
        (["--question", QUESTION, "{run}"], "--question"),
    ],
)
def test_view_errors_are_one_line_naming_the_flag(run_folder, tmp_path, capsys, flags, named):
    (tmp_path / "t.txt").write_text("x")
    (tmp_path / "other.json").write_text(json.dumps({"graph": {}, "nodes": [{"id": 0}], "edges": []}))
    argv = ["view", *(f.format(run=run_folder, tmp=tmp_path) for f in flags)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err, err
