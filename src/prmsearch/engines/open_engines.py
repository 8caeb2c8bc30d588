"""The engines this process has started and not yet closed, so that every way out closes them.

A vLLM engine runs in processes of its own (``VLLM::EngineCore`` and its ``VLLM::Worker``), and
they outlive a parent that exits without closing it: a worker holds its weights and KV cache
(gigabytes) until someone kills it. Every engine is tracked here from its start to its close;
:func:`close_open_engines` closes those still open, and runs at interpreter exit. The command line
calls it on every exit, SIGTERM included (:mod:`prmsearch.cli.termination`), and a process that
dies without running Python's exit code is covered by :mod:`~prmsearch.engines.orphan_watchdog`.

Engines are held by weak reference: an engine its owner dropped is vLLM's own to clean up.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_open: dict[int, tuple[weakref.ref, Callable[[Any], None]]] = {}


def track(engine: Any, close: Callable[[Any], None]) -> None:
    """Hold ``engine`` as open until :func:`untrack`; ``close(engine)`` closes it at exit."""
    with _lock:
        _open[id(engine)] = (weakref.ref(engine), close)


def untrack(engine: Any) -> None:
    """``engine`` is closed (or being closed): nothing more to do for it at exit."""
    with _lock:
        _open.pop(id(engine), None)


def open_engines() -> list[Any]:
    """The engines started and not closed, still alive."""
    with _lock:
        refs = list(_open.values())
    return [engine for ref, _ in refs if (engine := ref()) is not None]


def close_open_engines() -> int:
    """Close every engine still open, all at the same time (each may wait a moment for its
    processes to stop); errors are swallowed, since this runs on the way out. Returns how many
    were closed."""
    with _lock:
        entries = [(ref(), close) for ref, close in _open.values()]
        _open.clear()
    entries = [(engine, close) for engine, close in entries if engine is not None]
    if not entries:
        return 0

    def close_one(entry: tuple[Any, Callable[[Any], None]]) -> None:
        engine, close = entry
        with contextlib.suppress(Exception):
            close(engine)

    # plain threads: at interpreter exit an executor takes no more work
    threads = [threading.Thread(target=close_one, args=(entry,), name="prmsearch-exit") for entry in entries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(entries)


atexit.register(close_open_engines)


class ClosedOnExit:
    """Mixin for a backend with ``close()``: ``with Backend(...) as backend:`` closes it at the
    block's end, whether the block ends normally or by an exception (Ctrl-C included)."""

    def close(self) -> None:  # pragma: no cover - every user defines its own
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
