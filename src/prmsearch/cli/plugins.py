"""``--plugin`` and ``$PRMSEARCH_PLUGINS``: import the user's modules so that their registrations run."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from prmsearch.cli.errors import FlagError

#: Environment variable naming plugin modules to import (comma-separated), like ``--plugin``.
PLUGINS_ENV = "PRMSEARCH_PLUGINS"

T = TypeVar("T")

#: Plugins this process has imported (a ``.py`` file by its resolved path): each runs once.
_LOADED: set[str] = set()


def plugin_names(names: Sequence[str]) -> tuple[str, ...]:
    """``$PRMSEARCH_PLUGINS`` and then ``names``, with ``.py`` files made absolute: the list that
    another process (a Ray actor, which may run in another folder) must import to see the same
    registrations."""
    return tuple(_key(name) for name in [*_env_plugins(), *names])


def _env_plugins() -> list[str]:
    return [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]


def _key(name: str) -> str:
    """A plugin's identity: a module name, or a ``.py`` file's absolute path."""
    return str(Path(name).expanduser().resolve()) if name.endswith(".py") else name


def build_with_plugins(plugins: Sequence[str], build: Callable[[], T]) -> T:
    """Import ``plugins`` in this process, then call ``build``: how a Ray actor builds backends
    that the user's plugins registered (use ``functools.partial`` of it, which pickles)."""
    load_plugins(plugins, from_env=False)
    return build()


def load_plugins(names: Sequence[str], *, from_env: bool = True) -> None:
    """Import each plugin (a module name, or a path to a ``.py`` file) so its registrations run;
    those of ``$PRMSEARCH_PLUGINS`` first unless ``from_env`` is false. A plugin already imported
    by this process is not run again."""
    import importlib
    import importlib.util

    for name in [*_env_plugins(), *names] if from_env else names:
        key = _key(name)
        if key in _LOADED:
            continue
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
            _LOADED.add(key)
        except Exception as exc:  # any failure of the user's module: one line naming it
            fix = "give an importable module (pkg.module) or an existing .py file that imports cleanly"
            raise FlagError("--plugin", name, f"{type(exc).__name__}: {exc}; {fix}") from exc
