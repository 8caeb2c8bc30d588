"""Who may search now: at most ``max_in_flight`` requests are answered at once, up to
``max_queued`` more wait in arrival order for a place, and one more is turned away (429).

A burst of clients is queued rather than refused, so a load of 200 clients at once is served in
turn instead of retried into a storm of 429s; the queue's bound keeps one client from piling up
work without end. Everything runs on the server's one event loop, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable


class QueueFull(Exception):
    """Every place and every queue slot is taken: the request is turned away (429)."""


class Admission:
    """Places for searching requests, handed out first come, first served."""

    def __init__(self, max_in_flight: int, max_queued: int) -> None:
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.in_flight = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def queued(self) -> int:
        """Requests waiting for a place."""
        return len(self._waiting)

    async def enter(self, gone: Callable[[], Awaitable[bool]], deadline: float | None,
                    poll_s: float = 0.25) -> None:
        """Take a place, waiting in the queue for one if all are taken.

        Raises :class:`QueueFull` at once when the queue is full too, ``TimeoutError`` when the
        monotonic ``deadline`` passes first and ``ConnectionAbortedError`` when ``gone()`` says the
        client left while it waited (the request then holds no place and no queue slot).
        """
        if self.in_flight < self.max_in_flight and not self._waiting:
            self.in_flight += 1
            return
        if len(self._waiting) >= self.max_queued:
            raise QueueFull
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            while True:
                timeout = poll_s if deadline is None else min(poll_s, max(0.0, deadline - time.monotonic()))
                done, _ = await asyncio.wait({turn}, timeout=timeout)
                if done:
                    return  # leave() handed this request its place
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError
                if await gone():
                    raise ConnectionAbortedError
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.leave()  # the place came just as it gave up: pass it on
            else:
                turn.cancel()
                self._waiting.remove(turn)
            raise

    def leave(self) -> None:
        """Give a place back: the longest-waiting request takes it, else it is free."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # in_flight stays: the place changes hands
                return
        self.in_flight -= 1
