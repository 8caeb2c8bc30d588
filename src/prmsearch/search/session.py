"""A driver that stays open: problems join a running search whenever they arrive.

`Driver.run` searches a fixed list. A server, or any caller that gets questions one at a time,
instead opens a `DriverSession`: its thread runs the driver's asynchronous flow, and each
``submit`` adds a problem to it at once, so concurrent questions share the backends' batches
(a problem submitted while others generate joins the next policy call) instead of each running
its own search. Each problem's result comes back as a ``concurrent.futures.Future``; cancelling
that future drops the problem's remaining work (what is in flight finishes, nothing new starts).
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from prmsearch.search.driver import Driver
from prmsearch.search.events import Close, Event, Joined, Wake
from prmsearch.search.job import Job
from prmsearch.search.protocol import BoundStrategy
from prmsearch.search.results import SearchResult


class SessionClosed(RuntimeError):
    """The session no longer takes problems (closed, or its thread stopped on an error)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far one submitted problem's search has come (a server's progress events).

    Attributes:
        nodes: steps in its tree so far (the root included).
        generated_tokens: tokens the policy generated for it so far.
        elapsed_s: seconds since it was submitted.
    """

    nodes: int
    generated_tokens: int
    elapsed_s: float


class DriverSession:
    """One driver's flow on a background thread, taking problems as they come.

    Args:
        driver: the driver whose backends and settings every problem uses.
        annotate: an optional note for a result (e.g. the policy's ``domain_note``).

    Example::

        with DriverSession(Driver(policy, scorer)) as session:
            future = session.submit("What is 2+3?", strategy, seed=0)
            print(future.result().answer)
    """

    def __init__(self, driver: Driver, annotate: Callable[[str], str | None] | None = None) -> None:
        self.driver = driver
        self.annotate = annotate
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True
        self._error: BaseException | None = None
        self._pending: dict[Future[SearchResult], Job] = {}  # each waiting caller's future and its problem
        self._numbers = itertools.count()
        self._thread = threading.Thread(target=self._run, name="prmsearch-session", daemon=True)
        self._thread.start()

    def __enter__(self) -> DriverSession:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:  # leaving on an error (Ctrl-C, SIGTERM): nobody waits for the work
            self.cancel_pending()
        self.close(wait=exc_type is None)

    def cancel_pending(self) -> int:
        """Cancel every submitted problem that has not finished: their remaining work is dropped at
        the flow's next event. Returns how many were cancelled."""
        with self._lock:
            futures = list(self._pending)
        return sum(future.cancel() for future in futures)

    @property
    def pending(self) -> int:
        """Problems submitted and not finished yet."""
        with self._lock:
            return len(self._pending)

    def submit(self, question: str, strategy: BoundStrategy, seed: int) -> Future[SearchResult]:
        """Add one problem to the running search; a future of its `SearchResult`.

        Raises `SessionClosed` after `close` (or when the session's thread died, naming why).
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-blank string, got {question!r:.60}")
        future: Future[SearchResult] = Future()
        with self._lock:
            if not self._open:
                why = f": {self._error!r}" if self._error is not None else ""
                raise SessionClosed(f"the search session is closed{why}")
            number = next(self._numbers)
            job = Job(number, question, strategy, int(seed))
            job.ticket = future
            self._pending[future] = job
            self._events.put(Joined(job))
        future.add_done_callback(self._wake_if_cancelled)
        return future

    def progress(self, future: Future[SearchResult]) -> Progress | None:
        """How far the problem of ``future`` has come; None once it finished (or if unknown).

        Read from another thread while the flow writes: the counts may lag by one step.
        """
        with self._lock:
            job = self._pending.get(future)
        if job is None:
            return None
        return Progress(len(job.tree), job.ledger.generated_tokens, time.perf_counter() - job.started)

    def _wake_if_cancelled(self, future: Future[SearchResult]) -> None:
        """A cancelled problem is dropped at the flow's next event: send one now, so that a
        caller who stopped waiting frees its batch slots at once, not when other work returns."""
        if future.cancelled():
            self._events.put(Wake())

    def close(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Take no more problems; with ``wait``, return once every submitted one has finished, or
        after ``timeout`` seconds (a server's drain). True when the session's thread has ended (the
        thread is a daemon: a process that exits with it running does not wait for it)."""
        with self._lock:
            if self._open:
                self._open = False
                self._events.put(Close())
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _finish(self, job: Job) -> None:
        result: SearchResult = self.driver.result(job)
        if self.annotate is not None:
            note = self.annotate(result.question)
            if note:
                result.notes.append(note)
        future = job.ticket
        with self._lock:
            waiting = self._pending.pop(future, None) is not None
        if waiting:
            with contextlib.suppress(InvalidStateError):  # cancelled meanwhile: nobody waits
                future.set_result(result)

    def _run(self) -> None:
        try:
            self.driver.flow([], self._finish, events=self._events, accepting=True)
        except BaseException as exc:  # a bug in the flow: fail every waiting caller, loudly
            with self._lock:
                self._open = False
                self._error = exc
                pending, self._pending = self._pending, {}
            for future in pending:
                with contextlib.suppress(InvalidStateError):
                    future.set_exception(exc)
            raise
