"""How a failed backend call or strategy is told apart and written down: whether a backend
cannot be reached at all, the kinds a failed result may record, and
the one-line ``"Type: message (at file:line)"`` a result records."""

from __future__ import annotations

import traceback

#: every kind a failed result may record: a backend's (`prmsearch.backend_errors`), a strategy
#: that broke its contract, a problem whose caller stopped waiting, or anything else
ERROR_KINDS = ("unreachable", "timeout", "server", "refused", "malformed_reply", "context_length",
               "backend", "strategy", "cancelled", "error")


def backend_unreachable(exc: BaseException) -> bool:
    """Whether a backend's exception says it cannot be reached at all (a true
    ``backend_unreachable`` attribute, as on the HTTP backends' ``ServerUnreachable``): then the
    driver fails the whole batch at once instead of retrying it problem by problem."""
    return bool(getattr(exc, "backend_unreachable", False))


def describe(exc: BaseException) -> str:
    """``"ExceptionType: message (at file.py:line)"``: the error text a failed problem keeps."""
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {frame[0].filename.rsplit('/', 1)[-1]}:{frame[0].lineno})" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"
