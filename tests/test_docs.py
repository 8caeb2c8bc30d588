"""The documentation cannot rot: the MkDocs site builds in strict mode (a broken link, a page
missing from the nav, a flag without help text or a public name without a docstring or an API
entry fails it), and every Python block of the user-facing pages runs as written on the embedded
models (a block preceded by ``<!-- not run: REASON -->`` is skipped, e.g. one that needs a GPU)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Pages whose Python blocks are run (the front door and the three uses).
RUN_PAGES = ["README.md", "docs/getting-started.md", "docs/uses/solve.md",
             "docs/uses/decoding-layer.md", "docs/uses/benchmark.md", "docs/real-models.md",
             "docs/uses/serve.md", "docs/uses/view-trees.md", "docs/uses/training-data.md"]
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def python_blocks(page: str) -> list[tuple[int, str]]:
    """(line number, code) of every Python block of ``page`` not marked ``not run``."""
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = []
    for match in _BLOCK.finditer(text):
        if "<!-- not run" in match.group("before"):
            continue
        line = text.count("\n", 0, match.start("code")) + 1
        blocks.append((line, match.group("code")))
    return blocks


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"}


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the [docs] extra (scripts/setup.sh installs it)")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--max-consecutive-failures" in cli and "prmsearch eval-prm" in cli  # generated from the parser
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "Searcher" in api and "One strategy over batched backends" in api  # from the docstrings


def test_every_run_page_has_blocks():
    assert sum(len(python_blocks(page)) for page in RUN_PAGES) >= 5


@pytest.mark.slow
@pytest.mark.parametrize(
    "page, line, code",
    [(page, line, code) for page in RUN_PAGES for line, code in python_blocks(page)],
    ids=lambda v: v.replace("/", "-") if isinstance(v, str) and v.endswith(".md") else str(v)[:8],
)
def test_python_block_runs(tmp_path, page, line, code):
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{page}:{line} failed:\n{run.stderr[-3000:]}"


def test_getting_started_lists_every_extra_of_the_package():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    missing = [name for name in extras if f"[{name}]" not in page]
    assert not missing, f"docs/getting-started.md does not list the extras {missing}"
