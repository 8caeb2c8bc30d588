"""The vLLM policy backend: every request of a driver round in ONE offline ``generate`` call.

Why vLLM: continuous batching and automatic prefix caching. A beam's children share their
parent's prompt, and the next round's prompts extend this round's, so whole KV blocks are
reused across samples and rounds (``RequestOutput.num_cached_tokens`` says how many).

Identical prompts to the transformers backend: the prompt text is built by the same
:mod:`~prmsearch.engines.prompt_formats` code and tokenised by the same transformers
tokenizer, and vLLM receives token ids (``TokensPrompt``), so both engines see the same tokens.

Per request: ``SamplingParams(n, temperature, top_p, max_tokens, stop=[delimiter], seed,
logprobs=0)``, and ``logprobs=None`` when the request does not read them
(``GenerationRequest.logprobs``; the engine then skips its log-softmax over the vocabulary).
``logprobs=0`` returns the sampled token's log-probability at each position;
vLLM's default ``logprobs_mode="raw_logprobs"`` gives the model's own log-probabilities (before
temperature / top-p), the same quantity the transformers backend reports. vLLM gives the
``i``-th sample of a seeded request the seed ``seed + i``, so samples depend only on the
request and its seed.

Step cutting follows the transformers backend exactly: the generated ids are decoded, the
step ends at the first delimiter after non-blank text (:func:`find_step_end`), and the step
keeps the fewest tokens covering its text (:func:`cut_at`); the delimiter token and EOS are
generated (and charged) but not part of ``token_ids`` or ``logprob``. vLLM stops at the first
occurrence of the delimiter, even before any text or after a heading alone; such samples are
continued from where they stopped (same seed stream) until they hold a complete step.

Finish reasons: a stop-string stop is ``STEP``, EOS (or another stop token) is ``EOS``, the
token limit or the end of the context is ``LENGTH``. Whole-solution requests
(``stop_at_step=False``) have no stop string: they end at EOS or the limit.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prmsearch.backend_hooks import PolicyBackend
from prmsearch.costs import ModelCost, folder_cost
from prmsearch.engines import open_engines
from prmsearch.engines.open_engines import ClosedOnExit
from prmsearch.engines.prompt_formats import PromptBuilder, PromptFormat, resolve_prompt_format
from prmsearch.engines.vllm_engine import (
    VLLMEngineConfig,
    build_llm,
    engine_config,
    max_model_len,
    model_folder,
    on_gpu,
    read_config,
    safetensors_parameters,
    shutdown_llm,
)
from prmsearch.engines.vllm_loop import EngineLoop
from prmsearch.policies.base import (
    Generation,
    GenerationRequest,
    StepOutput,
    TokenizerLock,
    generation_budget,
)
from prmsearch.policies.vllm_output import is_blank_step, step_output

SEED_MASK = (1 << 62) - 1  # vLLM adds the sample index to a request's seed; stay inside int64
BLANK_RETRIES = 4  # continuations of a sample whose step is not complete yet


@dataclass
class _Sample:
    """One sample's generated ids and their log-probabilities, possibly over several calls."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reason: str | None = None
    stop: int | str | None = None


@dataclass
class _Prepared:
    """One request, tokenised, with its seed and token limit."""

    request: GenerationRequest
    ids: list[int]
    seed: int
    max_new: int


def _seed(request: GenerationRequest) -> int:
    seed = request.seed if request.seed is not None else secrets.randbits(62)
    return int(seed) & SEED_MASK


class VLLMPolicy(ClosedOnExit, PolicyBackend):
    """A :class:`~prmsearch.policies.base.Policy` over an offline vLLM engine.

    Args:
        model: local folder or Hub id of a causal LM.
        prompt_format: a prompt format name or ``"auto"`` (as for the transformers backend).
        tokenizer: a loaded transformers tokenizer (default: the model's own).
        engine_loop: step the engine on its own thread and add each call's requests to it as
            they come (:mod:`~prmsearch.engines.vllm_loop`), so that calls from several threads
            share the engine's batches and each returns when its own requests finish; False:
            one blocking ``LLM.generate`` per call.
        **engine: :class:`~prmsearch.engines.vllm_engine.VLLMEngineConfig` fields
            (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, ``dtype``,
            ``block_size``, ``enable_prefix_caching``, ``extra``, ...).
    """

    def __init__(self, model: str | Path, *, prompt_format: str = "auto", tokenizer: Any = None,
                 engine_loop: bool = True, **engine: Any) -> None:
        cfg = engine_config(str(model), engine)
        if engine:
            raise ValueError(
                f"unknown VLLMPolicy arguments {sorted(engine)}; engine arguments are "
                f"{sorted(set(VLLMEngineConfig.__dataclass_fields__) - {'model'})}, other vLLM "
                "LLM arguments go in extra={...}"
            )
        if tokenizer is None:
            from prmsearch.engines.loading import load_tokenizer

            tokenizer = load_tokenizer(cfg.model, trust_remote_code=cfg.trust_remote_code)
        self.config = cfg
        self.tokenizer = tokenizer
        self.prompt_format: PromptFormat = resolve_prompt_format(
            prompt_format, tokenizer, model_folder(cfg.model)
        )
        self.llm = build_llm(cfg)
        self.max_model_len = max_model_len(self.llm)
        self._num_parameters = safetensors_parameters(model_folder(cfg.model))
        self.cost = folder_cost(model_folder(cfg.model)) or ModelCost.dense(self._num_parameters)
        self.eos_ids = _eos_ids(cfg.model, tokenizer)
        self._prompts = PromptBuilder(self.prompt_format, tokenizer)
        self._tokenizer_lock = TokenizerLock()
        self._loop = EngineLoop(self.llm) if engine_loop else None
        # tracked as the owner of its engine: closing it at exit also stops the engine loop, whose
        # callers would otherwise wait for an engine that is gone
        open_engines.untrack(self.llm)
        open_engines.track(self, VLLMPolicy.close)

    @property
    def num_parameters(self) -> int:
        """Parameter count (from the checkpoint headers), for the FLOP estimate."""
        return self._num_parameters

    @property
    def computes_on_host_cpu(self) -> bool:
        """Whether the engine computes on this machine's CPU (no CUDA device): the driver's
        ``auto`` schedule keeps two such backends in lock-step rounds, since two engines on the
        same cores only slow each other down."""
        return not on_gpu()

    @property
    def parallel_calls(self) -> bool:
        """With the engine loop, ``generate`` may be called from many threads at once and each
        call's requests join the running engine batch, so the driver advances each problem on
        its own (see :mod:`~prmsearch.engines.vllm_loop`)."""
        return self._loop is not None

    def close(self) -> None:
        """Stop the engine loop and the engine's processes (the policy is unusable afterwards)."""
        open_engines.untrack(self)
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        shutdown_llm(self.llm)

    def clear_caches(self) -> None:
        """Empty the engine's prefix cache (cold-cache measurements)."""
        if self._loop is not None:
            self._loop.call(self.llm.reset_prefix_cache)
        else:
            self.llm.reset_prefix_cache()

    def generate_raw(self, prompts: list[Any], params: list[Any]) -> list[Any]:
        """vLLM's final ``RequestOutput`` of each prompt (``TokensPrompt``) under its vLLM
        ``SamplingParams``, in order: through the engine loop, or one ``LLM.generate`` call
        without it. For measurements that need the engine itself (e.g. a raw-throughput call)."""
        if self._loop is not None:
            return self._loop.generate(prompts, params)
        return self.llm.generate(prompts, params, use_tqdm=False)

    # ----------------------------------------------------------------------------- prompts
    def prompt_text(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> str:
        """The exact text fed to the model for ``question`` and the steps taken so far."""
        return self._prompts.text(question, steps, delimiter)

    @property
    def context_tokens(self) -> int | None:
        """The engine's context length in tokens (``max_model_len``)."""
        return self.max_model_len

    def prompt_ids(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> list[int]:
        """The prompt's token ids."""
        return self._prompts.ids(question, steps, delimiter)

    def _prepare(self, index: int, request: GenerationRequest) -> _Prepared:
        ids = self.prompt_ids(request.question, request.steps, request.sampling.delimiter)
        max_new = generation_budget(index, len(ids), request.sampling.max_new_tokens, self.max_model_len)
        return _Prepared(request, ids, _seed(request), max_new)

    def _params(self, p: _Prepared, n: int, seed: int, max_new: int) -> Any:
        from vllm import SamplingParams as VSamplingParams

        sp = p.request.sampling
        return VSamplingParams(
            n=n,
            temperature=float(sp.temperature),
            top_p=float(sp.top_p),
            max_tokens=max_new,
            stop=[sp.delimiter] if p.request.stop_at_step else None,
            stop_token_ids=sorted(self.eos_ids),
            seed=seed,
            logprobs=0 if p.request.logprobs else None,
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
        )

    # ---------------------------------------------------------------------------- generate
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One :class:`Generation` per request, in order, from ONE ``LLM.generate`` call."""
        from vllm.inputs import TokensPrompt

        with self._tokenizer_lock:
            prepared = [self._prepare(i, r) for i, r in enumerate(requests)]
        if not prepared:
            return []
        # vllm needs Python >= 3.11: read as 3.10, the NotRequired keys of its TokensPrompt count as required
        prompts = [TokensPrompt(prompt_token_ids=p.ids) for p in prepared]  # type: ignore[typeddict-item]
        params = [self._params(p, p.request.n, p.seed, p.max_new) for p in prepared]
        outputs = self.generate_raw(prompts, params)
        samples: list[list[_Sample]] = []
        cached: list[int] = []
        for p, out in zip(prepared, outputs, strict=True):
            cached.append(min(int(out.num_cached_tokens or 0), len(p.ids)))
            by_index = sorted(out.outputs, key=lambda c: c.index)
            samples.append([_absorb(_Sample(), c, p.request.logprobs) for c in by_index])
        recomputed = self._continue_blank(prepared, samples)
        with self._tokenizer_lock:
            return [
                Generation(
                    samples=tuple(self._output(p, s) for s in group),
                    prompt_tokens_computed=len(p.ids) - c,
                    prompt_tokens_cached=c,
                    generated_tokens=sum(len(s.ids) for s in group),
                    prompt_tokens_recomputed=r,
                )
                for p, group, c, r in zip(prepared, samples, cached, recomputed, strict=True)
            ]

    def _blank(self, p: _Prepared, s: _Sample) -> bool:
        """A sample that stopped at a delimiter before its step was complete."""
        if not p.request.stop_at_step or not isinstance(s.stop, str) or len(s.ids) >= p.max_new:
            return False
        return is_blank_step(self.tokenizer, s.ids, p.request.sampling.delimiter)

    def _continue_blank(self, prepared: list[_Prepared], samples: list[list[_Sample]]) -> list[int]:
        """Continue blank samples past their leading delimiter (one batched call per retry);
        returns, per request, the prompt tokens the continuations prefilled again (charged)."""
        from vllm.inputs import TokensPrompt

        recomputed = [0] * len(prepared)
        for attempt in range(BLANK_RETRIES):
            with self._tokenizer_lock:
                todo = [(i, k) for i, p in enumerate(prepared) for k, s in enumerate(samples[i])
                        if self._blank(p, s)]
            if not todo:
                return recomputed
            prompts, params = [], []
            for i, k in todo:
                p, s = prepared[i], samples[i][k]
                seed = (p.seed + k + (attempt + 1) * 0x9E3779B1) & SEED_MASK
                # (vllm's NotRequired TokensPrompt keys read as required under Python 3.10, as above)
                prompts.append(TokensPrompt(prompt_token_ids=p.ids + s.ids))  # type: ignore[typeddict-item]
                params.append(self._params(p, 1, seed, p.max_new - len(s.ids)))
            outputs = self.generate_raw(prompts, params)
            for (i, k), out, prompt in zip(todo, outputs, prompts, strict=True):
                length = len(prompt["prompt_token_ids"])
                recomputed[i] += length - min(int(out.num_cached_tokens or 0), length)
                _absorb(samples[i][k], out.outputs[0], prepared[i].request.logprobs)
        return recomputed

    def _output(self, p: _Prepared, s: _Sample) -> StepOutput:
        """Cut one finished sample the way the transformers backend does."""
        lps = s.logprobs if p.request.logprobs else None
        return step_output(self.tokenizer, s.ids, lps, stopped=s.reason == "stop",
                           eos_ids=self.eos_ids, stop_at_step=p.request.stop_at_step,
                           delimiter=p.request.sampling.delimiter)


def _absorb(sample: _Sample, completion: Any, logprobs: bool) -> _Sample:
    """Append a vLLM ``CompletionOutput``'s ids (and per-token logprobs, when the request asked
    for them) to ``sample``."""
    ids = list(completion.token_ids)
    sample.reason = completion.finish_reason
    sample.stop = completion.stop_reason
    if not logprobs:
        sample.ids.extend(ids)
        return sample
    entries = completion.logprobs or []
    if len(entries) != len(ids):
        raise RuntimeError(
            f"vLLM returned {len(entries)} logprob entries for {len(ids)} tokens; "
            "the engine must run with logprobs enabled"
        )
    sample.ids.extend(ids)
    sample.logprobs.extend(float(entry[tok].logprob) for tok, entry in zip(ids, entries))
    return sample


def _eos_ids(model: str, tokenizer: Any) -> frozenset[int]:
    """End-of-sequence ids from the generation config (else the model config) and the tokenizer."""
    ids: set[int] = set()
    folder = model_folder(model)
    for name in ("generation_config.json", "config.json"):
        data = read_config(folder) if name == "config.json" else _read_json(folder, name)
        eos = data.get("eos_token_id")
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
        if ids:
            break
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def _read_json(folder: Path | None, name: str) -> dict[str, Any]:
    import json

    if folder is None or not (folder / name).is_file():
        return {}
    with (folder / name).open(encoding="utf-8") as f:
        data = json.load(f)
    return data if isinstance(data, dict) else {}
