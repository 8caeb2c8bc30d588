"""Fixes that an error names as keyword arguments, carried as data so each front end spells them
its own way: the library says ``pass on_error='skip'``, the command line says ``--skip-bad-rows``.

An error made by :func:`fixed` keeps its message's ``template`` and its :class:`Arg` list on the
exception; :func:`spelled` renders the same message with another spelling of each argument. No
front end needs to match message text to rewrite a fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

E = TypeVar("E", bound=BaseException)

#: An argument's value left for the user to fill in (spelled ``name=...``).
PLACEHOLDER = "..."


@dataclass(frozen=True)
class Arg:
    """One keyword argument a fix names: ``name``, a ``value`` (Python source text, e.g. ``"'skip'"``;
    :data:`PLACEHOLDER` when the user fills it in) and, where the Python spelling is not
    ``name=value``, that spelling (``python``)."""

    name: str
    value: str = PLACEHOLDER
    python: str | None = None

    def spelled_for_python(self) -> str:
        return self.python if self.python is not None else f"{self.name}={self.value}"


def literal(text: object) -> str:
    """``text`` made safe to splice into a template (its braces doubled)."""
    return str(text).replace("{", "{{").replace("}", "}}")


def fixed(kind: Callable[[str], E], template: str, *args: Arg) -> E:
    """An exception of ``kind`` whose message is ``template`` with each ``{}`` one of ``args`` in
    its Python spelling; the template and the arguments travel on the exception (see :func:`spelled`).
    Text spliced into ``template`` from outside goes through :func:`literal`."""
    error = kind(template.format(*(a.spelled_for_python() for a in args)))
    attach(error, template, args)
    return error


def attach(error: BaseException, template: str, args: tuple[Arg, ...]) -> None:
    """Record ``template`` and ``args`` on an exception built elsewhere (e.g. a subclass' __init__)."""
    error.fix_template = template  # type: ignore[attr-defined]
    error.fix_args = tuple(args)  # type: ignore[attr-defined]


def spelled(error: BaseException, spell: Callable[[Arg], str | None]) -> str | None:
    """The error's message with every argument spelled by ``spell`` (None from ``spell``: the
    Python spelling), or None when the error carries no fix."""
    template = getattr(error, "fix_template", None)
    if template is None:
        return None
    args: tuple[Arg, ...] = getattr(error, "fix_args", ())
    return template.format(*(spell(a) or a.spelled_for_python() for a in args))
