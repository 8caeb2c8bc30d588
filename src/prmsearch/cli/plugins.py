"""``--plugin`` and ``$PRMSEARCH_PLUGINS``: import the user's modules so that their registrations run."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from prmsearch.cli.errors import FlagError

#: Environment variable naming plugin modules to import (comma-separated), like ``--plugin``.
PLUGINS_ENV = "PRMSEARCH_PLUGINS"


def load_plugins(names: Sequence[str]) -> None:
    """Import each plugin (a module name, or a path to a ``.py`` file) so its registrations run."""
    import importlib
    import importlib.util
    import os

    from_env = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    for name in [*from_env, *names]:
        try:
            if name.endswith(".py"):
                path = Path(name).expanduser()
                if not path.is_file():
                    raise FileNotFoundError(f"no such file: {path}")
                spec = importlib.util.spec_from_file_location(f"prmsearch_plugin_{path.stem}", path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
            else:
                importlib.import_module(name)
        except Exception as exc:  # any failure of the user's module: one line naming it
            fix = "give an importable module (pkg.module) or an existing .py file that imports cleanly"
            raise FlagError("--plugin", name, f"{type(exc).__name__}: {exc}; {fix}") from exc
