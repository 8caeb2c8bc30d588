"""Errors of an engine that cannot start: one line each, naming the fix, never a traceback."""

from __future__ import annotations


class EngineError(RuntimeError):
    """A model engine could not start or run; the message says why and what to do."""


class EngineMemoryError(EngineError):
    """An engine cannot fit in the memory that is free; the message names the fix."""


class EngineStartError(EngineError):
    """An engine failed to start for a reason of its own (its log has the details)."""
