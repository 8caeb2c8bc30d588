"""Fewer garbage-collector pauses while a search loop runs (see `fewer_gc_pauses`)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: allocations between collections of the youngest generation while a driver runs (CPython: 700).
#: A lock-step round keeps its requests, replies and score requests alive until it ends (about
#: three objects a node); a threshold above one round's worth lets most of them die before a
#: collection walks them: at 1,000 problems of 64 nodes a round, 200,000 took the time spent in
#: the collector from 1.58 to 0.09 us a node (particle filtering; docs/performance.md). A search
#: leaves no cyclic garbage (reference counting frees all of it; tested), so collecting less often
#: holds no memory longer
GC_THRESHOLD = 200_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextmanager
def fewer_gc_pauses() -> Iterator[None]:
    """Collect the youngest GC generation every `GC_THRESHOLD` allocations instead of every 700
    while the search loop runs, and restore the old thresholds after the last running driver.

    The loop allocates many short-lived, acyclic objects (requests, step tuples, scores) that
    reference counting frees at once; each cyclic collection also walks the growing trees. With
    instant backends that took about a quarter of the driver's time (`benchmarks.overhead`).
    """
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            if 0 < _gc_saved[0] < GC_THRESHOLD:
                gc.set_threshold(GC_THRESHOLD, *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)
