"""SIGTERM and SIGHUP end a command the way Ctrl-C does: by an exception, so that every ``finally``
runs, rows written so far stay whole, the server drains, and every engine is closed.

By default these signals kill the process on the spot, and Python's exit code never runs: a vLLM
engine's processes outlive it, holding gigabytes. SIGTERM is what ``kill``, ``timeout``, systemd
and Kubernetes send, and SIGHUP what a closed terminal sends. A signal that was set to be ignored
(``nohup`` ignores SIGHUP) stays ignored; any other handler (the default, or one a library
installed outside Python) is replaced for the command's run and restored after.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: The signals turned into :class:`Terminated`, unless they are ignored.
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by a signal (SIGTERM, SIGHUP).

    A ``KeyboardInterrupt``, so that code which already stops cleanly on Ctrl-C stops the same
    way here; ``signal_number`` says which signal it was, for the exit status (128 + number).
    """

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number


def _raise_terminated(signal_number: int, frame: FrameType | None) -> None:
    raise Terminated(signal_number)


@contextmanager
def terminate_by_exception() -> Iterator[None]:
    """Within the block, :data:`TERMINATING_SIGNALS` raise :class:`Terminated` in the main thread
    (ignored signals stay ignored); the previous handlers come back at its end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for number in TERMINATING_SIGNALS:
        if signal.getsignal(number) is not signal.SIG_IGN:
            previous[number] = signal.signal(number, _raise_terminated)
    try:
        yield
    finally:
        for number, handler in previous.items():  # one installed outside Python cannot come back
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
