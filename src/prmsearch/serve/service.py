"""The search behind the server: one `Searcher` session that every request's questions join.

Questions from concurrent requests share the backends' batches: a question that arrives while
others are generating joins the next policy call, so 16 clients cost about one batched search. A
failed backend call fails only the questions in it (their requests get a 503 with the reason);
a crash of the session itself fails its waiting questions and the next request opens a new one.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future
from typing import Any

from prmsearch.api import Searcher, SearchSession
from prmsearch.search.driver import SearchResult
from prmsearch.search.protocol import BoundStrategy
from prmsearch.search.session import Progress, SessionClosed
from prmsearch.serve.errors import ApiError


class SearchService:
    """Submits questions to an open search session and turns failures into API errors."""

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher
        self._lock = threading.Lock()
        self._session: SearchSession | None = None
        self._closed = False
        self.served = 0
        self.failed = 0

    @property
    def pending(self) -> int:
        """Questions being searched now."""
        session = self._session
        return session.pending if session is not None else 0

    def check_fits(self, question: str, param: str = "messages", max_tokens: int | None = None) -> None:
        """Refuse a question whose prompt alone fills the policy's context, or has more than
        ``max_tokens`` tokens (the server's cap), when the policy can count its tokens."""
        policy = self.searcher.policy
        context = getattr(policy, "context_tokens", None)
        prompt_ids = getattr(policy, "prompt_ids", None)
        if prompt_ids is None or not (context or max_tokens):
            return
        try:  # the policy's own tokenizer lock where it has one (the search thread tokenizes too)
            with getattr(policy, "_tokenizer_lock", None) or contextlib.nullcontext():
                length = len(prompt_ids(question, []))
        except Exception:  # a tokenizer busy elsewhere: the search itself reports a misfit
            return
        if context and length >= context:
            raise ApiError(
                400,
                f"This model's maximum context length is {context} tokens; the question's prompt has "
                f"{length} tokens and leaves no room for a step: shorten the question",
                param=param,
                code="context_length_exceeded",
            )
        if max_tokens and length > max_tokens:
            raise ApiError(
                400,
                f"the question's prompt has {length} tokens, above this server's cap of {max_tokens} "
                "tokens a prompt (its --max-prompt-tokens): shorten the question",
                param=param,
                code="prompt_too_long",
            )

    def submit(self, question: str, strategy: BoundStrategy, seed: int | None) -> Future:
        """Start one question's search; the future gives its `SearchResult`."""
        for attempt in range(2):
            session = self._open_session()
            try:
                return session.submit(question, seed=seed, strategy=strategy)
            except SessionClosed:
                if attempt or self._closed:
                    raise ApiError(503, "the search session is closed; the server is shutting down") from None
                with self._lock:
                    if self._session is session:
                        self._session = None  # its flow died: the next submit opens a fresh one
        raise AssertionError("unreachable")

    def progress(self, future: Future) -> Progress | None:
        session = self._session
        return session.progress(future) if session is not None else None

    def outcome(self, result: SearchResult) -> SearchResult:
        """The result, or the API error its failure means (503 backend failure, 400 too long)."""
        if result.error is None:
            self.served += 1
            return result
        self.failed += 1
        if result.error_kind == "context_length":
            raise ApiError(400, f"the question does not fit the model: {result.error}",
                           param="messages", code="context_length_exceeded")
        raise ApiError(503, f"the search failed: {result.error}", code="backend_error")

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "pending": self.pending, "served": self.served, "failed": self.failed}

    def close(self, timeout: float | None = None) -> None:
        """Stop taking questions and let the running ones finish (for at most ``timeout`` seconds:
        after a drain, what is still searching is the work of requests already answered or
        dropped, and the process may exit without it)."""
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
        if session is not None:
            session.close(wait=True, timeout=timeout)

    def _open_session(self) -> SearchSession:
        with self._lock:
            if self._closed:
                raise ApiError(503, "the server is shutting down")
            if self._session is None:
                self._session = self.searcher.session()
            return self._session
