"""What the asynchronous flow's queue carries: a backend call that ended, a problem that joins a
running flow, a wake-up after a caller cancelled, and the close of a session."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from prmsearch.search.job import Job


@dataclass(frozen=True)
class CallEnded:
    """A backend call of the lane ``lane`` (``"generated"`` or ``"scored"``) on ``items`` ended;
    ``future`` holds its results or its exception."""

    lane: str
    items: list[Any]
    future: Future[Any]


@dataclass(frozen=True)
class Joined:
    """A problem joins the running flow (a session's caller submitted it)."""

    job: Job


@dataclass(frozen=True)
class Wake:
    """A caller cancelled a problem: the flow looks once to drop it."""


@dataclass(frozen=True)
class Close:
    """The session takes no more problems: the flow ends once the running ones have."""


Event = CallEnded | Joined | Wake | Close
