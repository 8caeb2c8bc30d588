"""The SGLang policy backend: the offline ``sglang.Engine`` or a server's native ``/generate`` API.

SGLang runs on GPUs only (its CPU build targets Intel AMX and is source-only), so this module is
written against SGLang's documented interface and its tests skip on machines without it:

* offline: ``sglang.Engine(model_path=..., **engine_args)`` and ``engine.generate(input_ids=
  [...], sampling_params=[...], return_logprob=True)``; one dict per prompt, in order;
* HTTP: ``POST {base_url}/generate`` with the same fields as JSON (a list of prompts is one batch).

Each answer holds ``meta_info.output_token_logprobs`` (``[logprob, token_id, text]`` per
generated token), ``meta_info.finish_reason`` (``{"type": "stop" | "length", "matched": ...}``)
and ``meta_info.prompt_tokens`` / ``cached_tokens`` (RadixAttention prefix hits).

A request with ``n`` samples becomes ``n`` prompts with ``n=1`` and the sampling seeds
``seed + i`` (``sampling_seed``; SGLang needs ``enable_deterministic_inference`` for seeded
sampling to be reproducible); the radix cache serves the shared prompt to all of them. Steps
are cut exactly as in the other backends (:func:`~prmsearch.policies.vllm_output.step_output`),
from the token ids.

How a driver round reaches the engine:

* offline: all its prompts in ONE ``engine.generate`` call;
* HTTP: its prompts, in order, cut into requests of at most ``max_prompts_per_request`` prompts,
  of which at most ``max_concurrency`` are in flight at once (SGLang batches across requests, so
  the server stays full while no single request grows long). Each request has ``retry.timeout``
  seconds; past it the client closes that request's connection (SGLang aborts a request whose
  client disconnected) and sends that request alone again after the
  :class:`~prmsearch.engines.http.RetryPolicy` backoff; requests already answered are never sent
  again. The outputs are put back in prompt order. A request that still times out after the
  retries raises :class:`~prmsearch.engines.http.ServerTimeout` (a ``ServerError``) naming the
  server, the timeout and how to raise it; a malformed answer, after its retries, a
  ``ServerError`` naming the field.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prmsearch.backend_hooks import PolicyBackend
from prmsearch.costs import ModelCost, folder_cost
from prmsearch.engines.http import (
    PostSession,
    RetryPolicy,
    ServerMalformedReply,
    ServerTimeout,
    auth_headers,
)
from prmsearch.engines.open_engines import ClosedOnExit
from prmsearch.engines.prompt_formats import resolve_prompt_format
from prmsearch.policies.base import Generation, GenerationRequest, StepOutput, TokenizerLock
from prmsearch.policies.vllm_output import step_output

SEED_MASK = (1 << 62) - 1


def check_generate(data: Any) -> None:
    """Raise ``ValueError`` naming the field when a native ``/generate`` answer lacks what this
    backend reads (the HTTP session then retries it as malformed)."""
    items = data if isinstance(data, list) else [data]
    for i, item in enumerate(items):
        _check_output(i, item)


def _check_output(i: int, item: Any) -> None:
    """Check one prompt's output: ``meta_info`` with ``[logprob, token_id, text]`` triples in
    ``output_token_logprobs``, a ``finish_reason`` object (or null) and token counts."""
    if not isinstance(item, Mapping):
        raise ValueError(f"output {i} is a {type(item).__name__}, not an object")
    meta = item.get("meta_info")
    if not isinstance(meta, Mapping):
        raise ValueError(f"output {i}: meta_info is missing or not an object: {meta!r:.80}")
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise ValueError(f"output {i}: meta_info.output_token_logprobs is missing or not a list "
                         f"(the request sets return_logprob): {entries!r:.80}")
    for j, entry in enumerate(entries):
        if not (isinstance(entry, (list, tuple)) and len(entry) >= 2 and _is_int(entry[1])
                and (entry[0] is None or isinstance(entry[0], (int, float)))):
            raise ValueError(f"output {i}: meta_info.output_token_logprobs[{j}] is not a "
                             f"[logprob, token_id, text] triple: {entry!r:.80}")
    finish = meta.get("finish_reason")
    if finish is not None and not isinstance(finish, Mapping):
        raise ValueError(f"output {i}: meta_info.finish_reason is not an object: {finish!r:.80}")
    for name in ("prompt_tokens", "cached_tokens"):
        value = meta.get(name)
        if value is not None and not (_is_int(value) and value >= 0):
            raise ValueError(f"output {i}: meta_info.{name} is not an int >= 0: {value!r:.80}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SGLangHTTPOptions:
    """How one driver round is cut into ``/generate`` requests (HTTP only).

    Attributes:
        max_prompts_per_request: prompts (samples) in one request. Small enough that a timeout
            loses little work and each request finishes well within ``retry.timeout``; large
            enough that typical rounds of a few beams x a few samples go out whole. Default 64.
        max_concurrency: requests in flight at once (default 8, i.e. up to 512 prompts): the
            server batches across requests, so this, not the request size, is what fills it.
    """

    max_prompts_per_request: int = 64
    max_concurrency: int = 8

    def __post_init__(self) -> None:
        for name in ("max_prompts_per_request", "max_concurrency"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    def spans(self, n_prompts: int) -> list[tuple[int, int]]:
        """``[start, stop)`` of each request's prompts, in order."""
        step = self.max_prompts_per_request
        return [(a, min(a + step, n_prompts)) for a in range(0, n_prompts, step)]


def _retry_policy(retry: RetryPolicy | Mapping[str, Any] | None, max_concurrency: int) -> RetryPolicy:
    """The retry policy with the policy's own ``max_concurrency`` (one place sets it)."""
    if isinstance(retry, RetryPolicy):
        return replace(retry, max_concurrency=max_concurrency)
    options = dict(retry or {})
    if "max_concurrency" in options:
        raise ValueError("retry.max_concurrency is not used by SGLangPolicy; pass max_concurrency="
                         f"{options['max_concurrency']!r} to the policy instead")
    return RetryPolicy(**options, max_concurrency=max_concurrency)


class SGLangPolicy(ClosedOnExit, PolicyBackend):
    """A :class:`~prmsearch.policies.base.Policy` over SGLang (offline engine or HTTP server).

    Args:
        model: the model folder or Hub id (tokenizer, prompt format; the offline engine's weights).
        base_url: a running SGLang server (``http://host:port``); ``None`` starts an offline Engine.
        prompt_format: prompt format name or ``"auto"``.
        num_parameters: parameter count for the FLOP estimate (default: from safetensors headers).
        api_key_env: NAME of the environment variable holding the server's API key.
        retry: timeout of one HTTP request and its retries (:class:`RetryPolicy` or its fields
            as a mapping, without ``max_concurrency``, which is the policy's own option).
        max_prompts_per_request, max_concurrency: how a round is cut into HTTP requests; see
            :class:`SGLangHTTPOptions`.
        **engine: ``sglang.Engine`` arguments (``tp_size``, ``mem_fraction_static``,
            ``context_length``, ``dtype``, ...), offline only.
    """

    def __init__(self, model: str | Path, *, base_url: str | None = None, prompt_format: str = "auto",
                 num_parameters: int | None = None, api_key_env: str | None = None,
                 retry: RetryPolicy | Mapping[str, Any] | None = None,
                 max_prompts_per_request: int = 64, max_concurrency: int = 8, **engine: Any) -> None:
        from prmsearch.engines.loading import load_tokenizer
        from prmsearch.engines.vllm_engine import model_folder, read_config, safetensors_parameters

        self.model = str(model)
        folder = model_folder(self.model)
        self.tokenizer = load_tokenizer(self.model)
        self.prompt_format = resolve_prompt_format(prompt_format, self.tokenizer, folder)
        self._num_parameters = num_parameters if num_parameters is not None else \
            safetensors_parameters(folder)
        self.cost = folder_cost(folder) or ModelCost.dense(self._num_parameters)
        eos = read_config(folder).get("eos_token_id")
        ids = set(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        self.eos_ids = frozenset(ids)
        self.max_length = engine.get("context_length") or read_config(folder).get("max_position_embeddings")
        self.http = SGLangHTTPOptions(max_prompts_per_request, max_concurrency)
        self.retry = _retry_policy(retry, max_concurrency)
        self._session = PostSession(auth_headers(api_key_env), self.retry)
        self._tokenizer_lock = TokenizerLock()
        self.base_url = base_url.rstrip("/") if base_url else None
        self.engine = None
        if self.base_url is None:
            try:
                import sglang
            except ImportError as exc:
                raise ImportError(
                    "the sglang backend needs SGLang on a CUDA machine: pip install 'prmsearch[sglang]'"
                ) from exc
            self.engine = sglang.Engine(model_path=self.model, **engine)
        elif engine:
            raise ValueError(f"engine arguments {sorted(engine)} apply to the offline engine only")

    @property
    def num_parameters(self) -> int:
        return self._num_parameters

    @property
    def parallel_calls(self) -> bool:
        """Over HTTP, ``generate`` may be called from several threads at once (the server batches
        across requests), so the driver advances each problem on its own; offline it may not."""
        return self.engine is None

    def close(self) -> None:
        """Shut the offline engine down, or close the HTTP connections."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
        self._session.close()

    @property
    def context_tokens(self) -> int | None:
        """The model's context length in tokens (None when neither engine nor config says)."""
        return self.max_length or None

    def prompt_ids(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> list[int]:
        """The prompt's token ids (the same text and tokenizer as the other backends)."""
        text = self.prompt_format.render(self.tokenizer, question, steps, delimiter)
        return list(self.tokenizer(text, add_special_tokens=self.prompt_format.add_special_tokens)
                    ["input_ids"])

    def _params(self, request: GenerationRequest, seed: int, max_new: int) -> dict[str, Any]:
        sp = request.sampling
        params: dict[str, Any] = {
            "max_new_tokens": max_new,
            "temperature": float(sp.temperature),
            "top_p": float(sp.top_p),
            "sampling_seed": seed,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "stop_token_ids": sorted(self.eos_ids),
        }
        if request.stop_at_step:
            params["stop"] = [sp.delimiter]
        return params

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One :class:`Generation` per request, in order (one ``generate`` call offline, bounded
        requests over HTTP: see the module's docstring)."""
        prompts: list[list[int]] = []
        params: list[dict[str, Any]] = []
        owners: list[int] = []
        lengths: list[int] = []
        for i, req in enumerate(requests):
            with self._tokenizer_lock:
                ids = self.prompt_ids(req.question, req.steps, req.sampling.delimiter)
            max_new = req.sampling.max_new_tokens
            if self.max_length:
                if len(ids) >= self.max_length:
                    raise ValueError(f"request {i}: the prompt has {len(ids)} tokens, the context "
                                     f"only {self.max_length}; nothing is truncated")
                max_new = min(max_new, self.max_length - len(ids))
            seed = (req.seed if req.seed is not None else secrets.randbits(62)) & SEED_MASK
            lengths.append(len(ids))
            for k in range(req.n):
                prompts.append(ids)
                params.append(self._params(req, (seed + k) & SEED_MASK, max_new))
                owners.append(i)
        if not prompts:
            return []
        outputs = self._call(prompts, params)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"SGLang returned {len(outputs)} outputs for {len(prompts)} prompts")
        grouped: list[list[dict[str, Any]]] = [[] for _ in requests]
        for owner, out in zip(owners, outputs, strict=True):
            grouped[owner].append(out)
        with self._tokenizer_lock:
            return [self._generation(req, outs, n_prompt)
                    for req, outs, n_prompt in zip(requests, grouped, lengths, strict=True)]

    def _call(self, prompts: list[list[int]], params: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.engine is not None:
            out = self.engine.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
            return list(out)
        return self._post(prompts, params)

    def _post(self, prompts: list[list[int]], params: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The round's outputs from ``/generate`` requests of bounded size, in prompt order."""
        url = f"{self.base_url}/generate"
        spans = self.http.spans(len(prompts))
        bodies = [{"input_ids": prompts[a:b], "sampling_params": params[a:b], "return_logprob": True}
                  for a, b in spans]
        try:
            answers = self._session.post(url, bodies, check_generate)
        except ServerTimeout as exc:
            raise ServerTimeout(self._timeout_message(exc), url=url, timeout=exc.timeout,
                                attempts=exc.attempts) from exc
        outputs: list[dict[str, Any]] = []
        for (a, b), data in zip(spans, answers, strict=True):
            items = data if isinstance(data, list) else [data]
            if len(items) != b - a:
                raise ServerMalformedReply(f"{url} returned {len(items)} outputs for the {b - a} prompts "
                                           f"{a}..{b - 1} of one request")
            outputs.extend(items)
        return outputs

    def _timeout_message(self, exc: ServerTimeout) -> str:
        """What timed out, and the knobs that fix a server that is slow rather than down."""
        return (
            f"the SGLang server at {self.base_url} did not answer a /generate request (up to "
            f"{self.http.max_prompts_per_request} prompts) within the timeout of {exc.timeout}s "
            f"in {exc.attempts} attempts. If the server is just slow, raise the timeout: "
            f"SGLangPolicy(..., retry={{'timeout': <seconds>}}), in a recipe policy.args.retry."
            f"timeout; or send smaller requests (max_prompts_per_request, now "
            f"{self.http.max_prompts_per_request}) or fewer at once (max_concurrency, now "
            f"{self.http.max_concurrency}). Otherwise check that the server is up and healthy"
        )

    def _generation(self, req: GenerationRequest, outs: list[dict[str, Any]], n_prompt: int
                    ) -> Generation:
        samples: list[StepOutput] = []
        generated = 0
        cached = 0
        for out in outs:
            meta = out["meta_info"]
            entries = meta["output_token_logprobs"]
            ids = [int(e[1]) for e in entries]
            lps = [float(e[0]) if e[0] is not None else 0.0 for e in entries]
            finish = meta.get("finish_reason") or {}
            stopped = isinstance(finish, dict) and finish.get("type") == "stop"
            samples.append(step_output(self.tokenizer, ids, lps, stopped=stopped, eos_ids=self.eos_ids,
                                       stop_at_step=req.stop_at_step, delimiter=req.sampling.delimiter))
            generated += len(ids)
            cached = max(cached, int(meta.get("cached_tokens") or 0))
        cached = min(cached, n_prompt)
        return Generation(tuple(samples), n_prompt - cached, cached, generated)


def sglang_policy(model: str | Path, **kwargs: Any) -> SGLangPolicy:
    """Factory registered as ``sglang``."""
    return SGLangPolicy(model, **kwargs)
