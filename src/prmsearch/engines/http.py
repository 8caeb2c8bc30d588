"""Async JSON POSTs with bounded concurrency, timeouts and retries with exponential backoff.

Used by the OpenAI-compatible and SGLang HTTP policies. A :class:`PostSession` keeps one event
loop thread and one connection pool for a backend's whole life; its ``post`` sends a batch of
bodies concurrently and returns the decoded JSON objects in order, or raises
:class:`ServerError` after the retries of the first body that could not be served
(:class:`ServerTimeout` when its last attempt timed out). ``post`` may be called from many
threads at once (the search driver sends each problem's requests as their own call): every
call shares the session's ``max_concurrency`` requests in flight, so the server sees a steady
stream and the client never opens more connections than that. :func:`post_all` is the one-shot
form (its own loop and pool for one batch). Each
body is retried on its own: a body that failed is sent again, the ones already answered never
are. What is retried: timeouts, connection errors (a server that is down or restarting), HTTP
408/409/429 and 5xx, and bodies that are not JSON (a truncated or malformed answer). Other 4xx
answers are the caller's mistake and fail at once.

``timeout`` bounds a whole attempt (connect, send, wait, read), not each socket operation: an
attempt past it is cancelled, which closes its connection, and servers such as SGLang and vLLM
abort a request whose client disconnected, so a retry never runs beside its abandoned twin.

The API key is read from an environment variable whose NAME is configured; the key itself is
put in the ``Authorization`` header only and never appears in errors, reprs or logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from prmsearch.backend_errors import (
    BackendFailed,
    BackendRefused,
    BackendTimeout,
    BackendUnreachable,
    MalformedReply,
)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class ServerError(BackendFailed):
    """The server could not serve a request after all retries (or refused it outright)."""


class ServerRefused(BackendRefused, ServerError):
    """The server answered this request with an HTTP 4xx (not retried: it is up and said no).

    Attributes:
        status: the HTTP status.
        body: the start of the server's reply.
    """

    def __init__(self, message: str, *, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ServerMalformedReply(MalformedReply, ServerError):
    """The server answered, but not with the shape the API promises (a count, a field)."""


class ServerTimeout(BackendTimeout, ServerError):
    """Every attempt at one request ended in the timeout (or the last one did).

    Attributes:
        url: the URL posted to.
        timeout: the seconds one attempt was given.
        attempts: attempts made.
    """

    def __init__(self, message: str, *, url: str, timeout: float, attempts: int) -> None:
        super().__init__(message)
        self.url = url
        self.timeout = timeout
        self.attempts = attempts


class ServerUnreachable(BackendUnreachable, ServerError):
    """Every attempt at one request failed to connect (refused, reset, DNS): the server is down or
    not there. Its type tells the search driver so: retrying the same work request by request
    cannot help, so it does not."""


@dataclass(frozen=True)
class RetryPolicy:
    """Timeouts and retries of HTTP requests.

    Attributes:
        timeout: seconds for one whole attempt (connect, send, wait, read); past it the attempt
            is cancelled and its connection closed, so a hung server fails after this.
        max_retries: attempts after the first; 0 means no retry.
        backoff: seconds before the first retry; doubled before each further retry.
        backoff_max: cap on one wait.
        max_concurrency: requests in flight at once.
    """

    timeout: float = 120.0
    max_retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 8.0
    max_concurrency: int = 32

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        if self.backoff < 0 or self.backoff_max < 0:
            raise ValueError(f"backoff and backoff_max must be >= 0, got {self.backoff}, {self.backoff_max}")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an int >= 1, got {self.max_concurrency!r}")

    def wait(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        return min(self.backoff_max, self.backoff * (2.0**attempt))


def auth_headers(api_key_env: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` when the named environment variable is set."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}


class _Retryable(Exception):
    """An attempt failed in a way worth retrying; the message says how (never the key)."""


async def _post_one(client: Any, url: str, body: Mapping[str, Any], retry: RetryPolicy,
                    check: Callable[[Any], None] | None) -> Any:
    import httpx

    last = "no attempt made"
    timed_out = unreachable = False
    for attempt in range(retry.max_retries + 1):
        if attempt:
            await asyncio.sleep(retry.wait(attempt - 1))
        timed_out = unreachable = False
        try:
            # wait_for cancels the attempt at the deadline; httpx then closes the connection.
            response = await asyncio.wait_for(client.post(url, json=body), retry.timeout)
            if response.status_code in RETRY_STATUS:
                raise _Retryable(f"HTTP {response.status_code}: {response.text[:200]!r}")
            if response.status_code >= 400:
                raise ServerRefused(
                    f"{url} refused the request with HTTP {response.status_code}: {response.text[:500]}",
                    status=response.status_code, body=response.text[:500],
                )
            try:
                data = response.json()
            except (json.JSONDecodeError, ValueError) as exc:
                raise _Retryable(f"malformed JSON ({exc}): {response.text[:200]!r}") from None
            if not isinstance(data, (dict, list)):
                raise _Retryable(f"expected a JSON object or array, got {type(data).__name__}")
            if check is not None:
                try:
                    check(data)
                except (KeyError, TypeError, ValueError, IndexError) as exc:
                    raise _Retryable(f"malformed response ({type(exc).__name__}: {exc})") from None
            return data
        except _Retryable as exc:
            last = str(exc)
        except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
            last, timed_out = f"timed out after {retry.timeout}s ({type(exc).__name__})", True
        except httpx.TransportError as exc:
            last = f"connection failed ({type(exc).__name__}: {exc})"
            unreachable = isinstance(exc, httpx.ConnectError)
    attempts = retry.max_retries + 1
    message = f"{url} failed after {attempts} attempts; last error: {last}"
    if timed_out:
        raise ServerTimeout(message, url=url, timeout=retry.timeout, attempts=attempts)
    if unreachable:
        raise ServerUnreachable(message)
    raise ServerError(message)


def _client(headers: Mapping[str, str], retry: RetryPolicy) -> Any:
    """An async client whose pool holds as many connections as requests may be in flight (a
    request never waits in the pool: with more waiting than connections, httpx spends its time
    matching requests to connections)."""
    import httpx

    limits = httpx.Limits(max_connections=retry.max_concurrency,
                          max_keepalive_connections=retry.max_concurrency)
    return httpx.AsyncClient(headers=dict(headers), timeout=httpx.Timeout(retry.timeout), limits=limits)


async def _gather_posts(client: Any, gate: asyncio.Semaphore, url: str,
                        bodies: Sequence[Mapping[str, Any]], retry: RetryPolicy,
                        check: Callable[[Any], None] | None) -> list[Any]:
    """Every body through ``gate``; the answers in order. A failure cancels the batch's other
    requests, so nothing keeps running behind the caller."""

    async def one(body: Mapping[str, Any]) -> Any:
        async with gate:
            return await _post_one(client, url, body, retry, check)

    tasks = [asyncio.ensure_future(one(b)) for b in bodies]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _post_all(url: str, bodies: Sequence[Mapping[str, Any]], headers: Mapping[str, str],
                    retry: RetryPolicy, check: Callable[[Any], None] | None) -> list[Any]:
    async with _client(headers, retry) as client:
        gate = asyncio.Semaphore(retry.max_concurrency)
        return await _gather_posts(client, gate, url, bodies, retry, check)


class PostSession:
    """One background event loop and one connection pool, shared by every batch a backend sends.

    Why: a new loop and pool per batch costs connection set-up every driver round, and a pool
    that many concurrent callers share through one gate keeps the requests in flight at
    ``retry.max_concurrency`` however many problems post at once. The loop thread starts on the
    first ``post`` (and again after a fork or unpickling: the session pickles as its settings
    only); ``close`` stops it. The headers (the API key) are never shown by ``repr``.
    """

    def __init__(self, headers: Mapping[str, str], retry: RetryPolicy) -> None:
        self._headers = dict(headers)
        self.retry = retry
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._gate: asyncio.Semaphore | None = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"PostSession(max_concurrency={self.retry.max_concurrency}, running={self.running})"

    def __getstate__(self) -> dict[str, Any]:
        return {"headers": self._headers, "retry": self.retry}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["headers"], state["retry"])

    @property
    def running(self) -> bool:
        """Whether the loop thread is up (in this process)."""
        return self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if not self.running:
                self._reset()  # a forked child inherits a dead thread: start afresh
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="prmsearch-http", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            assert self._loop is not None
            return self._loop

    async def _post(self, url: str, bodies: Sequence[Mapping[str, Any]],
                    check: Callable[[Any], None] | None) -> list[Any]:
        if self._client is None:  # made on the loop thread, used only there
            self._client = _client(self._headers, self.retry)
            self._gate = asyncio.Semaphore(self.retry.max_concurrency)
        assert self._gate is not None
        return await _gather_posts(self._client, self._gate, url, bodies, self.retry, check)

    def submit(self, url: str, bodies: Sequence[Mapping[str, Any]],
               check: Callable[[Any], None] | None = None) -> Future:
        """Start posting ``bodies``; a future of their JSON answers in order (see `post_all`)."""
        if not bodies:
            done: Future = Future()
            done.set_result([])
            return done
        return asyncio.run_coroutine_threadsafe(self._post(url, list(bodies), check), self._started())

    def post(self, url: str, bodies: Sequence[Mapping[str, Any]],
             check: Callable[[Any], None] | None = None) -> list[Any]:
        """POST every body concurrently and wait: the answers in order, or the batch's error.
        Safe from any thread except the session's own loop."""
        future = self.submit(url, bodies, check)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: stop the batch's requests too
            raise

    def close(self) -> None:
        """Close the connections and stop the loop thread (a later ``post`` starts a new one)."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            if loop is None or thread is None or not thread.is_alive() or self._pid != os.getpid():
                self._reset()
                return
            if client is not None:
                # a connection that will not close is dropped with the loop
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()
            self._reset()


def post_all(url: str, bodies: Sequence[Mapping[str, Any]], headers: Mapping[str, str],
             retry: RetryPolicy, check: Callable[[Any], None] | None = None) -> list[Any]:
    """POST every body to ``url`` concurrently; the JSON answers (objects or arrays) in order.

    ``check(data)`` validates an answer's shape; a ``KeyError``/``TypeError``/``ValueError`` from
    it counts as a malformed answer and is retried. Works inside a running event loop too (the
    batch then runs on a helper thread).
    """
    if not bodies:
        return []
    coro_factory = lambda: _post_all(url, bodies, headers, retry, check)  # noqa: E731
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro_factory())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
