"""The ASGI app of ``prmsearch serve``: OpenAI's chat and completions routes over one search.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models`` (and
``/v1/models/{id}``), ``GET /health``. Every error is an OpenAI-style body with its status (400 a
refused value, 401 a missing or wrong key, 404 an unknown model, 422 a malformed body, 503 a failed
backend); the server keeps serving after each. A client that disconnects mid-search has its
questions' remaining work dropped, nobody else's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from prmsearch.search.driver import SearchResult
from prmsearch.seeding import problem_seed
from prmsearch.serve.admission import Admission, QueueFull
from prmsearch.serve.catalog import ModelCatalog
from prmsearch.serve.config import ServeConfig
from prmsearch.serve.errors import ApiError, bad_request
from prmsearch.serve.requests import SearchRequest, parse_chat, parse_completion
from prmsearch.serve.responses import chat_response, completion_id, completion_response, stream_chunks
from prmsearch.serve.service import SearchService
from prmsearch.tree_graph import json_ready

log = logging.getLogger("prmsearch.serve")

#: Seconds between checks that a waiting (non-streaming) client is still connected.
DISCONNECT_POLL_S = 0.25


class ClientGone(Exception):
    """The client closed its connection before the search finished."""


def build_app(service: SearchService, catalog: ModelCatalog, config: ServeConfig) -> FastAPI:
    """The server's app over ``service`` (one search session shared by all requests)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(service.close, config.drain_timeout_s)

    app = FastAPI(title="prmsearch", summary="PRM-guided test-time search behind the OpenAI API",
                  lifespan=lifespan)
    key = os.environ.get(config.api_key_env) or None
    started = int(time.time())
    admission = Admission(config.max_in_flight, config.max_queued)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        error = ApiError(500, f"internal error: {type(exc).__name__}: {exc}")
        return JSONResponse(error.body(), status_code=500)

    def authorize(request: Request) -> None:
        """The bearer key check of every ``/v1`` route (a dependency, not a middleware: an HTTP
        middleware wraps the request's channel and hides a client's disconnect)."""
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            what = "no API key" if not given else "an incorrect API key"
            raise ApiError(401, f"The request has {what}; send 'Authorization: Bearer <key>' with the key "
                           f"this server was started with (${config.api_key_env})", code="invalid_api_key")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(authorize)])

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {**service.health(), "in_flight": admission.in_flight, "queued": admission.queued}

    def model_card(model_id: str) -> dict[str, Any]:
        route = catalog.resolve(model_id)
        return {"id": model_id, "object": "model", "created": started, "owned_by": "prmsearch",
                "prmsearch": {"strategy": route.strategy, "budget": route.budget}}

    @v1.get("/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(m) for m in catalog.ids()]}

    @v1.get("/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        return model_card(model_id)

    @v1.post("/chat/completions")
    async def chat(request: Request) -> Any:
        search = parse_chat(await _json_body(request), catalog, config)
        return await _answer(request, search, chat=True)

    @v1.post("/completions")
    async def completions(request: Request) -> Any:
        search = parse_completion(await _json_body(request), catalog, config)
        return await _answer(request, search, chat=False)

    async def _answer(request: Request, search: SearchRequest, chat: bool) -> Any:
        for question in search.questions:
            service.check_fits(question, "messages" if chat else "prompt", config.max_prompt_tokens)
        deadline = None if config.request_timeout_s is None else time.monotonic() + config.request_timeout_s
        try:
            await admission.enter(request.is_disconnected, deadline, DISCONNECT_POLL_S)
        except QueueFull:
            error = ApiError(429, f"this server is answering {config.max_in_flight} requests and has "
                             f"{config.max_queued} more waiting (its --max-in-flight and --max-queued); "
                             "retry after a moment", code="rate_limit_exceeded")
            return JSONResponse(error.body(), status_code=429, headers={"Retry-After": "1"})
        except ConnectionAbortedError:
            return _client_gone()
        except TimeoutError:
            return _timed_out(" while it waited for its turn")
        # the place is given back by _counted (a stream) or the finally below
        if search.stream:
            return StreamingResponse(_counted(_stream(search, chat)), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            futures = _submit(search)
            try:
                results = await _wait(futures, request, deadline)
            except ClientGone:
                return _client_gone()
            except TimeoutError:
                return _timed_out("; its work was dropped")
        finally:
            admission.leave()
        if chat:
            return _json(chat_response(search, results[0]))
        return _json(completion_response(search, results))

    def _client_gone() -> JSONResponse:
        return JSONResponse({"error": {"message": "client closed the request"}}, status_code=499)

    def _timed_out(what: str) -> JSONResponse:
        error = ApiError(504, f"the request took longer than this server's deadline of "
                         f"{config.request_timeout_s:g} s a request (its --request-timeout){what}. Ask "
                         "for a smaller budget", code="timeout")
        return JSONResponse(error.body(), status_code=504)

    async def _counted(stream: AsyncIterator[str]) -> AsyncIterator[str]:
        """A streamed answer, counted in flight until its last chunk (or the client leaving)."""
        try:
            async for chunk in stream:
                yield chunk
        finally:
            admission.leave()

    def _submit(search: SearchRequest) -> list[Future]:
        futures: list[Future] = []
        try:
            for question in search.questions:
                seed = None if search.seed is None else problem_seed(search.seed, question)
                futures.append(service.submit(question, search.strategy, seed))
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return futures

    async def _wait(futures: list[Future], request: Request, deadline: float | None) -> list[SearchResult]:
        """The results once all are done; cancels them all if the client goes away first or the
        monotonic ``deadline`` passes."""
        waiting = {asyncio.wrap_future(f) for f in futures}
        try:
            while waiting:
                _, waiting = await asyncio.wait(waiting, timeout=DISCONNECT_POLL_S)
                if waiting and await request.is_disconnected():
                    raise ClientGone
                if waiting and deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError
        finally:
            for future in futures:
                future.cancel()  # no-op for the finished ones
        return [service.outcome(f.result()) for f in futures]

    async def _stream(search: SearchRequest, chat: bool) -> AsyncIterator[str]:
        """Progress comments while searching, then the answer as OpenAI chunks and ``[DONE]``."""
        stream_id, created = completion_id(chat), int(time.time())
        futures: list[Future] = []
        try:
            yield ": searching\n\n"
            futures = _submit(search)
            waiting = {asyncio.wrap_future(f) for f in futures}
            while waiting:
                _, waiting = await asyncio.wait(waiting, timeout=config.progress_every_s)
                if waiting:
                    yield f": progress {json.dumps(_progress(futures))}\n\n"
            results = [service.outcome(f.result()) for f in futures]
            for chunk in stream_chunks(search, results, chat, stream_id, created):
                yield f"data: {_dumps(chunk)}\n\n"
        except ApiError as exc:  # the status line is sent: the error goes in the stream
            yield f"data: {_dumps(exc.body())}\n\n"
        finally:
            for future in futures:
                future.cancel()  # the client left mid-stream: drop what is still searching
        yield "data: [DONE]\n\n"

    def _progress(futures: list[Future]) -> dict[str, Any]:
        done = sum(f.done() for f in futures)
        states = [p for p in (service.progress(f) for f in futures) if p is not None]
        return {"questions": len(futures), "done": done, "nodes": sum(p.nodes for p in states),
                "generated_tokens": sum(p.generated_tokens for p in states),
                "elapsed_s": round(max((p.elapsed_s for p in states), default=0.0), 3)}

    app.include_router(v1)
    return app


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise bad_request("the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise bad_request("the request body is nested too deeply; send the OpenAI request object "
                          "(a few levels of objects and arrays)") from None
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad_request(f"the request body holds a lone UTF-16 surrogate ({exc.object[exc.start]!r}), "
                          "which is not text; send the text as UTF-8") from None
    except RecursionError:
        raise bad_request("the request body is nested too deeply; send the OpenAI request object") from None
    return body


def _dumps(body: dict[str, Any]) -> str:
    """One SSE payload; JSON has no NaN or infinity, so they become null (as in tree files)."""
    return json.dumps(json_ready(body), separators=(",", ":"))


def _json(body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(json_ready(body))
