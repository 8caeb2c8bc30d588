"""One name -> entry registry (Gymnasium style) for every kind of pluggable part.

Strategies, policy backends, scorers, PRM families, prompt formats and datasets all register
here the same way: ``register(name, target, summary)``, then ``get(name)`` / ``make(name, **kw)``.
A target is an object (a spec, a format class, a factory function), a lazy ``"module:attr"``
string, so registering a backend never imports its engine (torch, vLLM, ...) until someone makes
one, or an `Alias` of another name of the same registry. An unknown name is an error that lists
the known names and says how to fix it.

Packages add parts without any flag: a module that a package names under the ``prmsearch.plugins``
entry-point group (``[project.entry-points."prmsearch.plugins"]`` in its ``pyproject.toml``) is
imported the first time any registry is asked for a name it does not hold, or for its names, and
its registrations run then, as pytest finds its plugins. The embedded arithmetic domain registers
itself this way.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from prmsearch.fixes import Arg, fixed, literal

T = TypeVar("T")


class UnknownNameError(ValueError):
    """Raised for a name nothing was registered under; the message lists the known names."""


#: The entry-point group whose modules register parts when imported (see the module docstring).
PLUGIN_GROUP = "prmsearch.plugins"
_plugins_lock = threading.RLock()
_plugins_state = "unloaded"  # then "loading" (a plugin's import may itself ask a registry), "loaded"


def load_plugins() -> None:
    """Import every ``prmsearch.plugins`` entry point's module once; a plugin that fails to
    import is a warning naming it, and the others still load."""
    global _plugins_state
    if _plugins_state != "unloaded":
        return
    with _plugins_lock:
        if _plugins_state != "unloaded":
            return
        _plugins_state = "loading"
        try:
            from importlib.metadata import entry_points

            for point in entry_points(group=PLUGIN_GROUP):
                try:
                    point.load()
                except Exception as exc:  # one broken plugin must not break every command
                    warnings.warn(f"prmsearch plugin {point.name!r} ({point.value}) failed to load: "
                                  f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
        finally:
            _plugins_state = "loaded"


@dataclass(frozen=True)
class Alias:
    """A target that is another name of the same registry (resolved there when made), so a
    module can register a name for a part that lives above it without pointing at its module."""

    name: str


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered target, a one-line description for listings, and keyword arguments that
    ``make`` binds (so one factory can serve several names, e.g. a PRM family per name)."""

    name: str
    target: Any
    summary: str = ""
    bound: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self) -> Any:
        """The target, imported first when it was registered lazily as ``"module:attr"``."""
        if not isinstance(self.target, str):
            return self.target
        module_name, _, attr = self.target.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)


class Registry(Generic[T]):
    """Maps names to targets; ``get`` returns one, ``make`` calls one, a miss names the choices.

    Args:
        kind: what is registered, singular ("policy", "PRM family"); used in messages.
        listing: what precedes the known names in the unknown-name error, after "known"
            (default ``"<kind> names"``; ``""`` gives "known: a, b").
        register_with: the public function that registers one (named in the unknown-name fix).
        hint: one more sentence for the unknown-name error (e.g. a catch-all name to use); with
            ``hint_args``, a :mod:`prmsearch.fixes` template whose ``{}`` are those arguments.
    """

    def __init__(self, kind: str, *, listing: str | None = None, register_with: str | None = None,
                 hint: str = "", hint_args: tuple[Arg, ...] = ()) -> None:
        self.kind = kind
        self.listing = f"{kind} names" if listing is None else listing
        self.register_with = register_with or f"register_{kind.lower().replace(' ', '_')}"
        self.hint = hint
        self.hint_args = tuple(hint_args)
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, target: Any, summary: str = "", *, replace: bool = False,
                 bound: Mapping[str, Any] | None = None) -> None:
        """Register ``target`` under ``name``; registering a taken name needs ``replace=True``.
        ``bound`` keyword arguments are passed to the factory by ``make`` (callers may override)."""
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered; pass replace=True to override it")
        self._entries[name] = Entry(name, target, summary, dict(bound or {}))

    def has(self, name: str) -> bool:
        """Whether ``name`` is registered now, without loading plugins (for registration code)."""
        return name in self._entries

    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name`` (plugins loaded first when it is not registered), or an error
        listing every known name."""
        if name not in self._entries:
            load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            listing = f" {self.listing}" if self.listing else ""
            hint = f" {self.hint if self.hint_args else literal(self.hint)}" if self.hint else ""
            raise fixed(
                UnknownNameError,
                literal(f"unknown {self.kind} {name!r}; known{listing}: {known}. "
                        f"Use one of those, or register your own with {self.register_with}().") + hint,
                *self.hint_args,
            ) from None

    def get(self, name: str) -> Any:
        """The target registered under ``name`` (imported when lazy, followed when an alias)."""
        entry = self.entry(name)
        if isinstance(entry.target, Alias):
            return self.get(entry.target.name)
        return entry.resolve()

    def make(self, name: str, /, **kwargs: Any) -> T:
        """Call the factory registered under ``name`` with ``kwargs``."""
        entry = self.entry(name)
        factory: Callable[..., T] = self.get(name)
        return factory(**{**entry.bound, **kwargs})

    def names(self) -> list[str]:
        """All registered names, sorted (plugins loaded first)."""
        load_plugins()
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        """All entries, sorted by name."""
        return [self._entries[k] for k in self.names()]

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            load_plugins()
        return name in self._entries

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        load_plugins()
        return len(self._entries)
