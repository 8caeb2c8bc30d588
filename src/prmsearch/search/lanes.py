"""Backend lanes: where the driver's calls to one backend wait and run, off the driver's thread.

A lane holds the work waiting for its backend and decides when to call it. A *batching* lane
sends everything waiting in one call whenever its backend is free (an in-process model, which
is fastest on full batches); a *parallel* lane sends each item as its own call at once (a
server that batches across requests by itself, so that one problem's slow step delays nobody
else). A finished call is posted to the driver's event queue as ``(kind, items, future)``.
Lanes are used from the driver's thread only; the calls run on the lane's thread pool.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from prmsearch.search.events import CallEnded, Event


class Lane:
    """The calls of one backend: what waits, what runs, and how long the backend was busy.

    Args:
        kind: the event name posted when a call finishes (``"generated"``, ``"scored"``).
        call: runs one call on a list of items (on a pool thread) and returns its results.
        events: the driver's event queue.
        pool: the threads the calls run on.
        parallel: one call per item, sent at once (else one call for all waiting items, and
            only while no other call of this lane runs).
    """

    def __init__(self, kind: str, call: Callable[[list[Any]], Any],
                 events: queue.SimpleQueue[Event], pool: Executor, parallel: bool) -> None:
        self.kind = kind
        self.call = call
        self.events = events
        self.pool = pool
        self.parallel = parallel
        self.waiting: list[Any] = []
        self.in_flight = 0  # calls running
        self.items_in_flight = 0  # items in those calls
        self.calls = 0
        self.busy_s = 0.0  # time with at least one call of this lane running
        self.busy_since = 0.0  # when the running calls' busy spell began

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing running."""
        return not self.waiting and not self.in_flight

    def put(self, item: Any) -> None:
        """Queue one item for the next call."""
        self.waiting.append(item)

    def pump(self) -> int:
        """Start the calls the lane's rule allows now; returns how many were started."""
        if not self.waiting or (self.in_flight and not self.parallel):
            return 0
        batches = [[item] for item in self.waiting] if self.parallel else [self.waiting]
        self.waiting = []
        return self._start(batches)

    def _start(self, batches: list[list[Any]]) -> int:
        """Send each batch as one call on the pool; its event is posted when it ends."""
        if not self.in_flight:
            self.busy_since = time.perf_counter()
        for items in batches:
            self.in_flight += 1
            self.items_in_flight += len(items)
            self.calls += 1
            future = self.pool.submit(self.call, items)
            future.add_done_callback(self._poster(items))
        return len(batches)

    def _poster(self, items: list[Any]) -> Callable[[Future[Any]], None]:
        """The done-callback of one call on ``items``: posts its `CallEnded` event."""
        return lambda done: self.events.put(CallEnded(self.kind, items, done))

    def drop(self, dropped: Callable[[Any], bool]) -> None:
        """Leave out the waiting entries whose job ``dropped`` ends (a caller stopped waiting)."""
        self.waiting = [entry for entry in self.waiting if not dropped(entry[0])]

    def finished(self, items: list[Any], results: Any) -> tuple[list[Any], Any]:
        """Count one finished call (called by the driver when it takes the call's event); the
        entries it completed and their results (all of them, here: one call holds whole entries)."""
        self.in_flight -= 1
        self.items_in_flight -= len(items)
        if not self.in_flight:
            self.busy_s += time.perf_counter() - self.busy_since
        return items, results
