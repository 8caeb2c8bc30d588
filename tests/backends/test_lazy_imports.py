"""Importing the package and its backend registries must not import torch or transformers."""

from __future__ import annotations

import subprocess
import sys


def test_packages_do_not_import_torch():
    code = (
        "import sys; import prmsearch, prmsearch.policies, prmsearch.scorers;"
        "import prmsearch.policies.base, prmsearch.scorers.base, prmsearch.engines.prompt_formats;"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(bad);"
        "sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
