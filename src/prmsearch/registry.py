"""One name -> entry registry (Gymnasium style) for every kind of pluggable part.

Strategies, policy backends, scorers, PRM families, prompt formats and datasets all register
here the same way: ``register(name, target, summary)``, then ``get(name)`` / ``make(name, **kw)``.
A target is an object (a spec, a format class, a factory function) or a lazy ``"module:attr"``
string, so registering a backend never imports its engine (torch, vLLM, ...) until someone makes
one. An unknown name is an error that lists the known names and says how to fix it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """Raised for a name nothing was registered under; the message lists the known names."""


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
        hint: one more sentence for the unknown-name error (e.g. a catch-all name to use).
    """

    def __init__(self, kind: str, *, listing: str | None = None, register_with: str | None = None,
                 hint: str = "") -> None:
        self.kind = kind
        self.listing = f"{kind} names" if listing is None else listing
        self.register_with = register_with or f"register_{kind.lower().replace(' ', '_')}"
        self.hint = hint
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

    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name``, or an error listing every known name."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            listing = f" {self.listing}" if self.listing else ""
            hint = f" {self.hint}" if self.hint else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known{listing}: {known}. "
                f"Use one of those, or register your own with {self.register_with}().{hint}"
            ) from None

    def get(self, name: str) -> Any:
        """The target registered under ``name`` (imported when lazy)."""
        return self.entry(name).resolve()

    def make(self, name: str, /, **kwargs: Any) -> T:
        """Call the factory registered under ``name`` with ``kwargs``."""
        entry = self.entry(name)
        factory: Callable[..., T] = entry.resolve()
        return factory(**{**entry.bound, **kwargs})

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        """All entries, sorted by name."""
        return [self._entries[k] for k in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
