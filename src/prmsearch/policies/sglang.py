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
sampling to be reproducible); the radix cache serves the shared prompt to all of them. All
requests of a driver round go out in ONE ``generate`` call. Steps are cut exactly as in the
other backends (:func:`~prmsearch.policies.vllm_output.step_output`), from the token ids.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prmsearch.engines.http import RetryPolicy, auth_headers, post_all
from prmsearch.engines.prompt_formats import resolve_prompt_format
from prmsearch.policies.base import Generation, GenerationRequest, StepOutput
from prmsearch.policies.vllm_output import step_output

SEED_MASK = (1 << 62) - 1


def check_generate(data: Any) -> None:
    """Raise when a native ``/generate`` answer lacks what this backend reads (then retried)."""
    items = data if isinstance(data, list) else [data]
    for item in items:
        meta = item["meta_info"]
        if not isinstance(meta["output_token_logprobs"], list):
            raise TypeError("output_token_logprobs is not a list")


class SGLangPolicy:
    """A :class:`~prmsearch.policies.base.Policy` over SGLang (offline engine or HTTP server).

    Args:
        model: the model folder or Hub id (tokenizer, prompt format; the offline engine's weights).
        base_url: a running SGLang server (``http://host:port``); ``None`` starts an offline Engine.
        prompt_format: prompt format name or ``"auto"``.
        num_parameters: parameter count for the FLOP estimate (default: from safetensors headers).
        api_key_env: NAME of the environment variable holding the server's API key.
        retry: timeouts and retries of HTTP calls.
        **engine: ``sglang.Engine`` arguments (``tp_size``, ``mem_fraction_static``,
            ``context_length``, ``dtype``, ...), offline only.
    """

    def __init__(self, model: str | Path, *, base_url: str | None = None, prompt_format: str = "auto",
                 num_parameters: int | None = None, api_key_env: str | None = None,
                 retry: RetryPolicy | Mapping[str, Any] | None = None, **engine: Any) -> None:
        from prmsearch.engines.loading import load_tokenizer
        from prmsearch.engines.vllm_engine import model_folder, read_config, safetensors_parameters

        self.model = str(model)
        folder = model_folder(self.model)
        self.tokenizer = load_tokenizer(self.model)
        self.prompt_format = resolve_prompt_format(prompt_format, self.tokenizer, folder)
        self._num_parameters = num_parameters if num_parameters is not None else \
            safetensors_parameters(folder)
        eos = read_config(folder).get("eos_token_id")
        ids = set(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        self.eos_ids = frozenset(ids)
        self.max_length = engine.get("context_length") or read_config(folder).get("max_position_embeddings")
        self.retry = retry if isinstance(retry, RetryPolicy) else RetryPolicy(**dict(retry or {}))
        self._headers = auth_headers(api_key_env)
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

    def close(self) -> None:
        """Shut the offline engine down."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None

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
        """One :class:`Generation` per request, in order, from ONE batched ``generate`` call."""
        prompts: list[list[int]] = []
        params: list[dict[str, Any]] = []
        owners: list[int] = []
        lengths: list[int] = []
        for i, req in enumerate(requests):
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
        return [self._generation(req, outs, n_prompt)
                for req, outs, n_prompt in zip(requests, grouped, lengths, strict=True)]

    def _call(self, prompts: list[list[int]], params: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.engine is not None:
            out = self.engine.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
            return list(out)
        body = {"input_ids": prompts, "sampling_params": params, "return_logprob": True}
        (data,) = post_all(f"{self.base_url}/generate", [body], self._headers, self.retry, check_generate)
        return data if isinstance(data, list) else [data]  # type: ignore[return-value]

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
