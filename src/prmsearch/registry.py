"""A tiny name -> factory registry (Gymnasium style) shared by strategies and backends.

Factories may be given as callables or as lazy ``"module:attribute"`` strings, so that
registering a backend never imports its engine (torch, vLLM, ...) until someone makes one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """Raised for a name no factory was registered under; the message lists the known names."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered factory and a one-line description for listings."""

    name: str
    factory: Callable[..., T] | str
    summary: str = ""

    def resolve(self) -> Callable[..., T]:
        """Return the factory, importing it first when it was registered lazily."""
        if callable(self.factory):
            return self.factory
        module_name, _, attr = self.factory.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)


class Registry(Generic[T]):
    """Maps names to factories; ``make`` builds one and names the known choices on a miss."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, factory: Callable[..., T] | str, summary: str = "", *, replace: bool = False
    ) -> None:
        """Register ``factory`` under ``name``; re-registering a name needs ``replace=True``."""
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered; pass replace=True to override it")
        self._entries[name] = Entry(name, factory, summary)

    def entry(self, name: str) -> Entry[T]:
        """Return the entry for ``name`` or raise an error listing every known name."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known {self.kind} names: {known}. "
                f"Use one of those, or register your own with register_{self.kind.replace(' ', '_')}()."
            ) from None

    def make(self, name: str, /, **kwargs) -> T:
        """Build the object registered under ``name`` with ``kwargs``."""
        return self.entry(name).resolve()(**kwargs)

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        """All entries, sorted by name."""
        return [self._entries[k] for k in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries
