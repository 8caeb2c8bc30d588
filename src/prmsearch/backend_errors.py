"""Typed backend failures: how a policy or scorer says why it could not serve a request.

Every backend raises one of these (or a subclass of its own), and everything above reads the
failure's ``kind`` from its type, never from its message: the driver fails a whole batch at once
for an unreachable backend, a result row records ``error_kind``, a sweep stops after a run of
connection failures (or of a dead in-process engine: vLLM's ``EngineDeadError`` is read as
``server``), and the server answers a too-long question with a 400. Two of them are also
``ValueError``s, so that code catching bad input keeps catching them.

| type | ``kind`` | meaning |
|---|---|---|
| `BackendUnreachable` | ``unreachable`` | no connection at all (refused, reset, DNS): the backend is down |
| `BackendTimeout` | ``timeout`` | every attempt ran out of time |
| `BackendFailed` | ``server`` | the backend answered with an error after every retry (HTTP 5xx) |
| `BackendRefused` | ``refused`` | the backend is up and refused this request (HTTP 4xx) |
| `MalformedReply` | ``malformed_reply`` | an answer of the wrong shape (counts, values out of range) |
| `ContextTooLong` | ``context_length`` | the request does not fit the model's context |
"""

from __future__ import annotations

from typing import ClassVar


class BackendError(RuntimeError):
    """A backend could not serve a request; ``kind`` names how (see the module's table)."""

    kind: ClassVar[str] = "backend"
    #: the driver fails every problem of a batch at once instead of retrying them one by one
    backend_unreachable: ClassVar[bool] = False
    #: a run of these in a row means the backend looks down (a sweep stops early)
    connection: ClassVar[bool] = False


class BackendUnreachable(BackendError):
    """Every attempt failed to connect: the backend is down or not there."""

    kind = "unreachable"
    backend_unreachable = True
    connection = True


class BackendTimeout(BackendError):
    """Every attempt at one request ended in the timeout."""

    kind = "timeout"
    connection = True


class BackendFailed(BackendError):
    """The backend answered with an error after every retry (an HTTP 5xx, a crashed engine)."""

    kind = "server"
    connection = True


class BackendRefused(BackendError):
    """The backend is up and refused this request (an HTTP 4xx): retrying it cannot help."""

    kind = "refused"


class MalformedReply(BackendError, ValueError):
    """The backend answered, but not in the shape asked for (too few samples or scores, a score
    outside [0, 1], a body that is not the API's)."""

    kind = "malformed_reply"


class ContextTooLong(BackendError, ValueError):
    """The request (prompt plus room for its output) does not fit the model's context; nothing is
    ever truncated silently."""

    kind = "context_length"


#: exception class names of client libraries (httpx, aiohttp, requests) that mean no connection:
#: matched against the exception's type and its bases, never its message
_LIBRARY_CONNECTION_TYPES = frozenset({
    "ConnectError", "ConnectTimeout", "ReadTimeout", "RemoteProtocolError", "ClientConnectorError",
    "ServerDisconnectedError", "APIConnectionError", "APITimeoutError",
})


#: exception class names of in-process engines that mean the engine itself has died (vLLM's
#: engine core process exited): every later request fails the same way, as with a dead server
_ENGINE_DEAD_TYPES = frozenset({"EngineDeadError"})


def failure_kind(exc: BaseException) -> str:
    """The ``kind`` of a backend failure, from the exception's type: a `BackendError`'s own;
    ``unreachable`` or ``timeout`` for the standard library's connection errors and the client
    libraries' (by class name); ``server`` for an in-process engine that died (by class name,
    as a crashed server's); else ``error``."""
    if isinstance(exc, BackendError):
        return exc.kind
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError):
        return "unreachable"
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _LIBRARY_CONNECTION_TYPES:
        return "timeout" if any("Timeout" in name for name in names) else "unreachable"
    if names & _ENGINE_DEAD_TYPES:
        return "server"
    return "error"


#: the kinds that mean the backend could not be reached or answered with a server error
CONNECTION_KINDS = frozenset({"unreachable", "timeout", "server"})
