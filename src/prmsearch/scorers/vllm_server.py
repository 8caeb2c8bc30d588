"""The vLLM-server PRM scorer: a ``qwen-prm`` PRM served by vLLM in another process or on another host.

Why: the policy and the PRM often live on different GPUs or machines. The PRM is then started as
a vLLM pooling server (vLLM 0.32; the step tag is the family's separator id, 159 for the shipped
arithmetic PRM, 151651 for Qwen2.5-Math-PRM)::

    python -m vllm.entrypoints.openai.api_server --model PRM_DIR --runner pooling \\
        --pooler-config '{"step_tag_id": 159}' --host 0.0.0.0 --port 8001

and this scorer posts token ids to its ``POST /pooling`` route (served at the server root, not
under ``/v1``) with ``task: "token_classify"``. The server answers one row of class
probabilities per step tag; the positive class is the family's (index 1 for ``qwen-prm``).

Same scores, same costs as the in-process scorers: the token ids come from the same
:class:`~prmsearch.scorers.formats.QwenPRMFormat` (the PRM's own tokenizer, loaded locally; ids
after the last separator dropped), so the server scores exactly the tokens the transformers and
offline vLLM scorers score. A path whose steps were all scored before is served from a bounded
exact-score cache (:class:`~prmsearch.scorers.score_cache.StepScoreCache`) and charged as
``tokens_cached``; identical paths within one call are sent once. Every path sent is charged in
full as ``tokens_computed`` (token pooling reads no prefix cache on the server).

HTTP: one :class:`~prmsearch.engines.http.PostSession` per scorer (one connection pool, at most
``max_concurrency`` requests in flight however many threads score at once); up to
``paths_per_request`` paths per request; each request has a timeout and is retried with
exponential backoff on connection errors, timeouts, 408/409/429/5xx and truncated JSON. What
still fails raises an error that names the server, what failed and the fix; the search driver
then retries the batch problem by problem, so only the problems whose paths cannot be scored
fail, and a server that is down fails them all at once. An answer of the wrong shape (a missing
item, the wrong number of step rows, values that are not probabilities) is an error, never a
score.

The ``/pooling`` route of vLLM 0.32 is not behind ``--api-key`` (only ``/v1`` routes are): keep
the PRM server on a private network. A key, when the named variable is set, is still sent.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from prmsearch.backend_hooks import ScorerBackend
from prmsearch.costs import ModelCost, folder_cost
from prmsearch.engines.http import (
    PostSession,
    RetryPolicy,
    ServerError,
    ServerMalformedReply,
    ServerRefused,
    ServerTimeout,
    ServerUnreachable,
    auth_headers,
)
from prmsearch.engines.open_engines import ClosedOnExit
from prmsearch.scorers.base import ScoreCountError, ScoreRequest, StepScores, check_prm_length
from prmsearch.scorers.formats import QwenPRMFormat, make_format
from prmsearch.scorers.score_cache import StepScoreCache, step_keys

SUPPORTED_FAMILIES = ("qwen-prm",)
#: How far a row of the server's class probabilities may sum from 1 (float32 softmax).
_ROW_SUM_TOLERANCE = 1e-3


class PRMServerResponseError(ServerMalformedReply):
    """The PRM server answered, but not with one probability row per step of every path."""


@dataclass(frozen=True)
class VLLMServerPRMConfig:
    """Settings of :class:`VLLMServerPRMScorer`, validated at construction.

    Attributes:
        base_url: the server, e.g. ``http://10.0.0.2:8001`` (a trailing ``/v1``, as the policy's
            ``base_url`` has, is accepted: ``/pooling`` is served at the root).
        model: the served model name sent with every request (vLLM's default name is the
            ``--model`` argument); ``None`` sends none (the server's one model).
        tokenizer: local folder or Hub id of the PRM's tokenizer (the input format is built
            here); ``None`` uses ``model``.
        family: PRM family; only ``qwen-prm`` runs on vLLM's pooling runner.
        format_options: options of the family's input format (``separator``, ``system``...).
        api_key_env: NAME of the environment variable holding an API key (None: no key).
        context_length: the served PRM's context (``None``: the tokenizer folder's
            ``max_position_embeddings``, if known); longer paths raise
            :class:`~prmsearch.scorers.base.ContextLengthError` before anything is sent.
        num_parameters: the PRM's parameter count for the FLOP estimate (0: read from the
            tokenizer folder's safetensors when it holds the weights).
        score_cache_entries: bound on cached step scores (0 disables the cache).
        paths_per_request: most paths sent in one HTTP request.
        timeout, max_retries, backoff, backoff_max, max_concurrency: see
            :class:`~prmsearch.engines.http.RetryPolicy`.
    """

    base_url: str
    model: str | None = None
    tokenizer: str | None = None
    family: str = "qwen-prm"
    format_options: Mapping[str, Any] = field(default_factory=dict)
    api_key_env: str | None = "VLLM_API_KEY"
    context_length: int | None = None
    num_parameters: int = 0
    score_cache_entries: int = 200_000
    paths_per_request: int = 16
    timeout: float = 120.0
    max_retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 8.0
    max_concurrency: int = 32

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        for name in ("model", "tokenizer"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
        if self.family not in SUPPORTED_FAMILIES:
            raise ValueError(
                f"the vllm-server scorer runs PRM families {list(SUPPORTED_FAMILIES)}, got "
                f"{self.family!r}; vLLM's pooling runner serves Qwen2ForProcessRewardModel only, run "
                "the other families in process (make_scorer(family, model=...))"
            )
        if not isinstance(self.format_options, Mapping):
            raise ValueError(f"format_options must be a mapping, got {self.format_options!r}")
        if self.context_length is not None and (not isinstance(self.context_length, int)
                                                or self.context_length < 2):
            raise ValueError(f"context_length must be an int >= 2 or None, got {self.context_length!r}")
        for name, low in (("num_parameters", 0), ("score_cache_entries", 0), ("paths_per_request", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        self.retry()  # validates the retry fields

    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.timeout, self.max_retries, self.backoff, self.backoff_max,
                           self.max_concurrency)

    @property
    def server_root(self) -> str:
        """``base_url`` without a trailing ``/`` or ``/v1``."""
        root = self.base_url.rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root

    @property
    def pooling_url(self) -> str:
        return f"{self.server_root}/pooling"


def check_pooling(data: Any) -> None:
    """Raise when a ``/pooling`` answer lacks its envelope (then retried, as a truncated answer)."""
    items = data["data"]
    if not isinstance(items, list):
        raise TypeError("'data' is not a list")
    for item in items:
        if not isinstance(item["data"], list) or not isinstance(item["index"], int):
            raise TypeError("an item has no 'data' list or no 'index'")


@dataclass
class _Path:
    """One distinct path to send: the first request index that holds it, its ids and keys."""

    index: int
    steps: int
    ids: list[int]
    keys: list[bytes]


class VLLMServerPRMScorer(ClosedOnExit, ScorerBackend):
    """A :class:`~prmsearch.scorers.base.Scorer` whose PRM runs on a vLLM pooling server.

    Args:
        base_url: the server (see :class:`VLLMServerPRMConfig`).
        model: the served model name (also where the tokenizer is read unless ``tokenizer=``).
        tokenizer_object: an already loaded tokenizer (instead of loading ``tokenizer``).
        **kwargs: the other :class:`VLLMServerPRMConfig` fields.
    """

    def __init__(self, base_url: str, model: str | None = None, *, tokenizer_object: Any = None,
                 **kwargs: Any) -> None:
        cfg = VLLMServerPRMConfig(base_url=base_url, model=model, **kwargs)
        source = cfg.tokenizer or cfg.model
        if tokenizer_object is None:
            tokenizer_object = _load_tokenizer(cfg, source)
        self._setup(cfg, tokenizer_object)

    def _setup(self, cfg: VLLMServerPRMConfig, tokenizer: Any) -> None:
        from prmsearch.engines.vllm_engine import model_folder, read_config, safetensors_parameters

        self.config = cfg
        self.family = cfg.family
        self.tokenizer = tokenizer
        # qwen-prm, the one family served (SUPPORTED_FAMILIES)
        self.format = cast(QwenPRMFormat, make_format(cfg.family, tokenizer, **dict(cfg.format_options)))
        source = cfg.tokenizer or cfg.model
        folder = model_folder(source) if source else None
        self._num_parameters = cfg.num_parameters or safetensors_parameters(folder)
        self.cost = folder_cost(folder, score_head="score") or ModelCost.dense(self._num_parameters)
        known = read_config(folder).get("max_position_embeddings")
        self.max_length: int | None = cfg.context_length or (int(known) if known else None)
        self.url = cfg.pooling_url
        self._cache = StepScoreCache(cfg.score_cache_entries)
        self._session = PostSession(auth_headers(cfg.api_key_env), cfg.retry())
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer refuses concurrent borrowing

    # -------------------------------------------------------------------- life and settings
    def __getstate__(self) -> dict[str, Any]:
        """Pickles as its settings and tokenizer (for Ray workers): no connections, no cache."""
        return {"config": self.config, "tokenizer": self.tokenizer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(state["config"], state["tokenizer"])

    def __repr__(self) -> str:  # never shows headers (the API key)
        return f"VLLMServerPRMScorer(url={self.url!r}, model={self.config.model!r})"

    def close(self) -> None:
        """Close the connections (a later call opens new ones)."""
        self._session.close()

    def clear_caches(self) -> None:
        """Forget cached scores."""
        self._cache.clear()

    @property
    def num_parameters(self) -> int:
        """Parameter count for the FLOP estimate (0 when unknown)."""
        return self._num_parameters

    # ------------------------------------------------------------------------------ score
    def encode(self, request: ScoreRequest) -> tuple[list[int], list[int]]:
        """Token ids (cut after the last separator) and one read position per step."""
        self.format.check_text(request.question, request.steps)
        with self._tokenizer_lock:
            enc = self.format.encode(request.question, request.steps)
        return enc.ids[: enc.positions[-1] + 1], enc.positions

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One :class:`StepScores` per request, in order; the uncached paths go to the server
        concurrently. Thread-safe: concurrent calls share the connections and the limit."""
        results: list[StepScores | None] = [None] * len(requests)
        todo: dict[bytes, _Path] = {}
        duplicates: list[tuple[int, bytes]] = []
        for i, req in enumerate(requests):
            if not req.steps:
                results[i] = StepScores(np.zeros(0, dtype=np.float64), 0, 0)
                continue
            ids, positions = self.encode(req)
            check_prm_length(i, self.family, len(ids), self.max_length)
            keys = step_keys(ids, positions)
            cached = self._cache.lookup(keys)
            if cached is not None:
                results[i] = StepScores(cached, 0, len(ids))
                continue
            whole = keys[-1]  # the digest of every id sent: equal keys, equal inputs
            if whole in todo:
                duplicates.append((i, whole))
            else:
                todo[whole] = _Path(i, len(req.steps), ids, keys)
        paths = list(todo.values())
        for path, scores in zip(paths, self._score_paths(paths), strict=True):
            self._cache.store(path.keys, scores)
            results[path.index] = StepScores(scores, len(path.ids), 0)
        for i, whole in duplicates:  # charged as cached: nothing ran for them
            first = todo[whole]
            results[i] = StepScores(np.array(results[first.index].scores), 0, len(first.ids))  # type: ignore[union-attr]
        return results  # type: ignore[return-value]

    def _score_paths(self, paths: list[_Path]) -> list[np.ndarray]:
        """The step scores of every path, from the server (``paths_per_request`` per body)."""
        if not paths:
            return []
        size = self.config.paths_per_request
        chunks = [paths[k : k + size] for k in range(0, len(paths), size)]
        bodies = [self._body(chunk) for chunk in chunks]
        try:
            answers = self._session.post(self.url, bodies, check_pooling)
        except ServerError as exc:
            raise self._explained(exc, len(paths)) from exc
        out: list[np.ndarray] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            items = sorted(answer["data"], key=lambda item: item["index"])
            if [item["index"] for item in items] != list(range(len(chunk))):
                raise PRMServerResponseError(
                    f"PRM server {self.url} answered items {[item['index'] for item in items]} for "
                    f"{_paths(len(chunk))}; expected indices 0..{len(chunk) - 1} (is this a vLLM "
                    "pooling server?)"
                )
            out.extend(self._read(path, item["data"]) for path, item in zip(chunk, items, strict=True))
        return out

    def _body(self, chunk: list[_Path]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "input": [path.ids for path in chunk],
            "task": "token_classify",
            "use_activation": True,  # probabilities, whatever the server's pooler default
        }
        if self.config.model is not None:
            body["model"] = self.config.model
        return body

    def _read(self, path: _Path, data: Any) -> np.ndarray:
        """The positive-class probability of every step from one item's rows; the wrong count
        or values that are not probabilities are an error, never a score."""
        try:
            rows = np.asarray(data, dtype=np.float64)
        except (TypeError, ValueError):
            rows = np.zeros((0,))
        sep = self.format.sep_id
        if rows.ndim != 2 or rows.shape[0] != path.steps or rows.shape[1] < 2:
            raise ScoreCountError(
                f"PRM server {self.url} returned step scores of shape {rows.shape} for "
                f"{path.steps} steps; it must return one row per step tag. Start the server with "
                f"--runner pooling --pooler-config '{{\"step_tag_id\": {sep}}}' (the id of the "
                f"{self.family} separator {self.format.separator_text!r} in this tokenizer), and "
                "check that it serves the same PRM as the tokenizer given here"
            )
        sums = rows.sum(axis=1)
        if (not np.isfinite(rows).all() or rows.min() < 0.0 or rows.max() > 1.0
                or np.abs(sums - 1.0).max() > _ROW_SUM_TOLERANCE):
            raise PRMServerResponseError(
                f"PRM server {self.url} returned rows that are not class probabilities "
                f"(first row {rows[0].tolist()}); the server must apply the softmax "
                "(use_activation, on by default for Qwen2ForProcessRewardModel)"
            )
        return rows[:, self.format.positive_index].copy()

    def _explained(self, exc: ServerError, paths: int) -> ServerError:
        """The HTTP error of a batch with the server, what failed and the fix (same type, so the
        driver still sees a server that is down as unreachable)."""
        root = self.config.server_root
        what = f"PRM server {root}: scoring {_paths(paths)} failed ({exc})"
        start = (f"start it with `python -m vllm.entrypoints.openai.api_server --model <PRM> "
                 f"--runner pooling --pooler-config '{{\"step_tag_id\": {self.format.sep_id}}}' "
                 f"--port <port>`")
        if isinstance(exc, ServerTimeout):
            return ServerTimeout(
                f"{what}; fix: check the server's load and log, raise timeout= (now "
                f"{exc.timeout}s) or lower paths_per_request/max_concurrency",
                url=exc.url, timeout=exc.timeout, attempts=exc.attempts)
        if isinstance(exc, ServerUnreachable):
            return ServerUnreachable(
                f"{what}; fix: is the PRM server running and reachable from here "
                f"(curl {root}/health)? {start}")
        if isinstance(exc, ServerRefused):
            if "does not exist" in exc.body:  # the server's own reply names the missing model
                fix = (f"give the served model name ({root}/v1/models lists it) as model=, or "
                       "model=None for the server's one model")
            elif exc.status in (404, 405):
                fix = f"the server has no /pooling route: {start}"
            else:
                fix = f"see the PRM server's log; {start}"
            return ServerRefused(f"{what}; fix: {fix}", status=exc.status, body=exc.body)
        return ServerError(f"{what}; fix: see the PRM server's log; {start}")


def _paths(count: int) -> str:
    return f"{count} path" if count == 1 else f"{count} paths"


def _load_tokenizer(cfg: VLLMServerPRMConfig, source: str | None) -> Any:
    """The PRM's tokenizer from a local folder or Hub id; a clear error when there is none."""
    if source is None:
        raise ValueError(
            "the vllm-server scorer builds the PRM input here and needs the PRM's tokenizer: pass "
            "tokenizer=<the PRM's tokenizer folder or Hub id> (or model=<its folder or Hub id>)"
        )
    from prmsearch.engines.loading import load_tokenizer

    try:
        return load_tokenizer(source)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"could not load the PRM tokenizer from {source!r} ({type(exc).__name__}: "
            f"{str(exc)[:200]}); pass tokenizer=<the PRM's tokenizer folder or Hub id> (a served "
            "model name is not a folder)"
        ) from None


def vllm_server_prm(base_url: str, model: str | None = None, **kwargs: Any) -> VLLMServerPRMScorer:
    """Factory registered as ``vllm-server``."""
    return VLLMServerPRMScorer(base_url, model, **kwargs)
