"""Every script in examples/ runs end to end on the embedded models and prints what it promises.

Examples are found by glob, so a new one is run (and must exit 0 and print something) without
touching this file; the ones that other documents link to must exist and print their figures.
Each runs as a subprocess, offline, on one torch thread (these tiny models are faster that way on
a busy 2-core CPU), from the repository root.
"""

from __future__ import annotations

import ast
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))
TIMEOUT_S = 180

#: Lines each linked example must print (regular expressions, searched line by line in stdout).
EXPECTED_OUTPUT: dict[str, list[str]] = {
    "solve.py": [
        r"^answer: -?\d+$",
        r"^  [01]\.\d{3}  .*\\boxed\{-?\d+\}",  # the chosen path's last step, with its PRM score
        r"^  policy: \d+ calls, \d+ samples, [1-9]\d* generated tokens",
        r"^  PRM: [1-9]\d* calls, [1-9]\d* tokens computed, \d+ reused$",
        r"^  FLOPs: \d\.\d{3}e\+\d+ \(policy \d\.\d{3}e\+\d+, PRM \d\.\d{3}e\+\d+\)$",
    ],
    "decoding_layer.py": [
        r"^batch 2: 4 questions searched together$",
        r"^  test-00007: answer -?\d+ \(gold 12, (right|wrong)\)",
        r"^accuracy: \d/8 = \d+\.\d%$",
        r"^total FLOPs: \d\.\d{3}e\+\d+",
    ],
    "sweep_and_read.py": [
        r"^8 problems, 4 cells, rows in results\.jsonl$",
        r"^read with (pandas|json):$",
        r"^beam +1 +\d+\.\d% +\d\.\d{3}e\+\d+ +8$",
        r"^beam +4 +\d+\.\d% +\d\.\d{3}e\+\d+ +8$",
        r"^best_of_n +1 +\d+\.\d% +\d\.\d{3}e\+\d+ +8$",
        r"^best_of_n +4 +\d+\.\d% +\d\.\d{3}e\+\d+ +8$",
    ],
    "custom_strategy.py": [
        r"^test-00000: answer -?\d+ \(gold 32\), [2-8] of 8 solutions sampled, votes ",
        r"^accuracy: \d/4, total FLOPs \d\.\d{3}e\+\d+$",
    ],
    "custom_scorer.py": [
        r"^ +0\.\d{3} \| +0\.0\d\d \| 12 \* 2 = 44$",  # the calculator catches the wrong step
        r"^  test-00003: answer -?\d+ \(gold 79\), step scores ",
        r"^accuracy: \d/4, [1-9]\d* PRM tokens, total FLOPs \d\.\d{3}e\+\d+$",
    ],
}


#: The extension examples' strategy and scorer, put through the package's conformance checks (in a
#: subprocess: registering them here would leak into the registries other tests read).
CONFORMANCE_SCRIPT = """
import runpy
from prmsearch import resolve_scorer
from prmsearch.conformance import check_scorer, check_strategy
runpy.run_path("examples/custom_strategy.py")  # not as __main__: defines and registers only
check_strategy("early_stop_vote", n=8)
check_strategy("early_stop_vote", n=5, batch=2, agree=3)
runpy.run_path("examples/custom_scorer.py")
check_scorer(resolve_scorer("calculator-checked-arith"))
print("conformant")
"""


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` as users would: from the repository root, offline, one torch thread."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def test_linked_examples_are_present():
    assert set(EXPECTED_OUTPUT) <= {path.name for path in EXAMPLES}


def test_every_example_is_documented():
    """A module docstring that says how to run it, and a line in examples/README.md."""
    readme = (EXAMPLES_DIR / "README.md").read_text(encoding="utf-8")
    for path in EXAMPLES:
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert f"examples/{path.name}" in docstring, f"{path.name}: its docstring must show how to run it"
        assert f"examples/{path.name}" in readme, f"{path.name}: add a line for it to examples/README.md"


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs_and_prints_its_results(path: Path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    proc = run_python(str(path.relative_to(ROOT)))
    assert proc.returncode == 0, f"{path.name} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{path.name} printed nothing"
    for pattern in EXPECTED_OUTPUT.get(path.name, []):
        assert re.search(pattern, proc.stdout, re.MULTILINE), (
            f"{path.name} did not print a line matching {pattern!r}:\n{proc.stdout}"
        )


def test_sweep_example_readers_agree(tmp_path: Path):
    """The json fallback of sweep_and_read.py gives pandas' figures (a row without a ledger, as a
    failed search writes, counts as 0 FLOPs)."""
    reader = runpy.run_path(str(EXAMPLES_DIR / "sweep_and_read.py"))  # not as __main__: nothing runs
    rows = [
        {"qid": "a", "strategy": "beam", "budget": 4, "correct": True, "ledger": {"flops": 300}},
        {"qid": "b", "strategy": "beam", "budget": 4, "correct": False, "ledger": None},
        {"qid": "a", "strategy": "best_of_n", "budget": 1, "correct": False, "ledger": {"flops": 100}},
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    expected = {("beam", 4): (0.5, 150.0, 2), ("best_of_n", 1): (0.0, 100.0, 1)}
    assert reader["summarize_with_json"](results) == expected
    pytest.importorskip("pandas")
    assert reader["summarize_with_pandas"](results) == expected


@pytest.mark.slow
def test_custom_strategy_and_scorer_pass_the_conformance_checks():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("prmsearch.conformance")
    proc = run_python("-c", CONFORMANCE_SCRIPT)
    assert proc.returncode == 0 and "conformant" in proc.stdout, f"{proc.stdout}\n{proc.stderr}"
