"""scripts/real_model_table.py: a folder run with strategy options beyond the headline's
convention is a row of its own, never a stand-in for the plain strategy's cell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import real_model_table


def test_variant_names_the_options_beyond_the_last_step_score():
    assert real_model_table.variant("beam", {"beam": {"aggregation": "last"}}) == "beam"
    assert real_model_table.variant("beam", None) == "beam"
    assert real_model_table.variant("particle_filter", {"beam": {"distinct": True}}) == "particle_filter"
    distinct = {"beam": {"aggregation": "last", "distinct": True}}
    assert real_model_table.variant("beam", distinct) == "beam (distinct)"
    assert real_model_table.variant("beam", {"beam": {"aggregation": "min"}}) == "beam (aggregation=min)"
    assert (real_model_table.variant("beam", {"beam": {"aggregation": "min", "width": 2}})
            == "beam (aggregation=min, width=2)")


def _folder(path: Path, options: dict, rights: list[bool]) -> Path:
    path.mkdir()
    config = {"prm": "/m/qwen2.5-coder-1.5b-instruct", "prm_family": "verifier", "options": options}
    (path / "manifest.json").write_text(json.dumps({"config": config}))
    rows = [{"qid": f"gsm8k/{i}", "strategy": "beam", "budget": 16, "seed": 0, "correct": ok}
            for i, ok in enumerate(rights)]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_variant_folder_is_a_cell_of_its_own(tmp_path):
    plain = _folder(tmp_path / "plain", {"beam": {"aggregation": "last"}}, [True, False, False])
    distinct = _folder(tmp_path / "distinct", {"beam": {"aggregation": "last", "distinct": True}},
                       [True, True, False, False])  # more rows: would have won the plain cell
    cells, source = real_model_table.read_cells([plain, distinct])
    assert set(cells) == {("1.5B as verifier", "beam", 16, 0), ("1.5B as verifier", "beam (distinct)", 16, 0)}
    assert len(cells[("1.5B as verifier", "beam", 16, 0)]) == 3
    assert source[("1.5B as verifier", "beam (distinct)", 16, 0)] == distinct


def test_the_results_page_prints_the_tables_of_the_committed_rows():
    """docs/results/gsm8k.md holds exactly the tables the script prints from results/real-models/."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    printed = subprocess.run([sys.executable, str(root / "scripts" / "real_model_table.py")], cwd=root,
                             capture_output=True, text=True, timeout=300, check=True).stdout
    page = (root / "docs" / "results" / "gsm8k.md").read_text(encoding="utf-8")
    table_lines = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(table_lines) > 20
    missing = [line for line in table_lines if line not in page]
    assert not missing, f"docs/results/gsm8k.md lacks rows the script prints (paste them): {missing[:3]}"
