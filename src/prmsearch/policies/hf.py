"""The transformers policy backend: batched step generation with prefix reuse.

Why not ``generate()``: search needs exact control of stopping (a step delimiter on token
boundaries), raw log-probabilities, per-sample seeding that ignores batch composition, and
KV reuse across the steps that extend a node. This module runs its own decode loop over the
model's forward with a ``DynamicCache``:

1. Requests are sorted by prompt length and grouped under a token budget.
2. Each group is prefilled once (one row per request). A bounded LRU of token-prefix KV
   (:class:`~prmsearch.engines.kv_cache.PrefixKVCache`) supplies the longest cached prefix of
   every prompt, so extending a node's path prefills only the new tokens. Each prompt's KV is
   then stored for the next round.
3. The prefilled KV is expanded to ``n`` rows per request and decoded in row chunks under the
   same budget; finished rows are dropped from the batch as they accumulate. Each row's KV has
   room for its token limit, so a decode step writes one column in place instead of copying
   the whole cache (:class:`~prmsearch.engines.kv_cache.AppendLayer`).

Batch layout (prefill): ``[pad][cached][pad][new]`` per row, so every row's last prompt token
sits in the last column; the attention mask hides pads and ``position_ids`` carry each row's
true positions. Sampling is counter-based (see :mod:`prmsearch.policies.sampling`).

Out-of-memory on an accelerator: a failed prefill is retried with the group split in half, a
failed decode chunk with half the rows; both are exact (samples do not depend on batching).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prmsearch.backend_hooks import PolicyBackend
from prmsearch.engines.kv_cache import (
    PrefixKVCache,
    check_plain_cache,
    gather_cache,
    pack_rows,
    row_kv,
)
from prmsearch.engines.loading import (
    count_parameters,
    free_accelerator_memory,
    is_oom,
    load_tokenizer,
    local_dir,
    module_cost,
    quiet_loading,
    resolve_device,
    resolve_dtype,
)
from prmsearch.engines.prompt_formats import PromptBuilder, PromptFormat, resolve_prompt_format
from prmsearch.policies.base import (
    Finish,
    Generation,
    GenerationRequest,
    StepOutput,
    generation_budget,
)
from prmsearch.policies.sampling import choose_tokens, normalise_seed, row_keys, uniforms
from prmsearch.policies.step_end import DelimiterWatch, cut_at, decode, find_step_end


@dataclass(frozen=True)
class HFPolicyConfig:
    """Settings of :class:`HFPolicy`, validated at construction.

    Attributes:
        model: Hub id or local folder of a causal LM.
        prompt_format: a name from :data:`~prmsearch.engines.prompt_formats.PROMPT_FORMATS`
            or ``"auto"``.
        device: ``None`` = CUDA when available else CPU.
        dtype: ``None`` = bfloat16 on CUDA, float32 on CPU; or ``"float32"``, ``"bf16"``, ...
        trust_remote_code: allow the model folder's own Python code (off by default).
        max_batch_tokens: bound on padded tokens held per forward batch (rows x width).
        prefix_cache_tokens: bound on tokens whose KV the prefix cache keeps; 0 disables reuse.
        prefix_cache_device: where cached KV lives (``None`` = the model's device; ``"cpu"``
            saves accelerator memory at the cost of copies).
        gguf_file: file name of a GGUF checkpoint inside ``model``, dequantised at every load (about
            a minute for a 0.5B model on two cores); convert it once into a folder instead with
            :func:`prmsearch.engines.gguf.convert_gguf` (or ``scripts/fetch_real_models.py``).
        attn_implementation: passed to ``from_pretrained`` (``"sdpa"`` or ``"eager"``; flash
            attention does not support the padded-hole layout used here).
        compact_fraction: drop finished rows from a decode batch once this fraction of it
            has finished.
    """

    model: str
    prompt_format: str = "auto"
    device: str | None = None
    dtype: str | None = None
    trust_remote_code: bool = False
    max_batch_tokens: int = 32768
    prefix_cache_tokens: int = 65536
    prefix_cache_device: str | None = None
    gguf_file: str | None = None
    attn_implementation: str | None = "sdpa"
    compact_fraction: float = 0.25

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a Hub id or a folder, got {self.model!r}")
        if not isinstance(self.max_batch_tokens, int) or self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be an int >= 1, got {self.max_batch_tokens!r}")
        if not isinstance(self.prefix_cache_tokens, int) or self.prefix_cache_tokens < 0:
            raise ValueError(
                f"prefix_cache_tokens must be an int >= 0, got {self.prefix_cache_tokens!r}"
            )
        if not 0 < self.compact_fraction <= 1:
            raise ValueError(f"compact_fraction must be in (0, 1], got {self.compact_fraction}")
        if self.attn_implementation not in (None, "sdpa", "eager"):
            raise ValueError(
                "attn_implementation must be 'sdpa', 'eager' or None, got "
                f"{self.attn_implementation!r}"
            )


@dataclass
class _Prepared:
    """One request, tokenised, with its position in the caller's list and its seed."""

    index: int
    request: GenerationRequest
    ids: list[int]
    seed: int
    max_new: int


@dataclass
class _Prefill:
    """A prefilled group: batch KV, mask, next-token logits and per-request prompt counts."""

    past: Any
    mask: torch.Tensor
    logits: torch.Tensor
    computed: list[int]
    cached: list[int]


@dataclass
class _RowState:
    """Decoding state of one sample."""

    group_pos: int
    sample: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def load_causal_lm(cfg: HFPolicyConfig, device: torch.device, dtype: torch.dtype) -> Any:
    """Load the model of ``cfg`` in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": cfg.trust_remote_code}
    if cfg.gguf_file is not None:
        kwargs["gguf_file"] = cfg.gguf_file
    if cfg.attn_implementation is not None:
        kwargs["attn_implementation"] = cfg.attn_implementation
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(cfg.model, **kwargs)
    # transformers wraps PreTrainedModel.to in functools.wraps(Module.to): mypy reads it unbound
    return model.to(device).eval()  # type: ignore[arg-type]


class HFPolicy(PolicyBackend):
    """A :class:`~prmsearch.policies.base.Policy` over a transformers causal LM.

    Logprobs: each ``StepOutput.logprob`` is the model's raw log-probability (temperature 1,
    no top-p) of the returned ``token_ids``, summed. Seeds: a sample depends only on the
    request, its seed and its sample index; ``seed=None`` draws a fresh seed per request.
    """

    def __init__(self, model: str | Path, **kwargs: Any) -> None:
        tokenizer = kwargs.pop("tokenizer", None)
        cfg = HFPolicyConfig(model=str(model), **kwargs)
        device = resolve_device(cfg.device)
        dtype = resolve_dtype(cfg.dtype, device)
        if tokenizer is None:
            tok_kwargs = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
            tokenizer = load_tokenizer(cfg.model, trust_remote_code=cfg.trust_remote_code,
                                       **tok_kwargs)
        lm = load_causal_lm(cfg, device, dtype)
        self._setup(cfg, lm, tokenizer, device)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, **kwargs: Any) -> HFPolicy:
        """Wrap an already loaded model and tokenizer (``prompt_format`` etc. as keywords)."""
        obj = cls.__new__(cls)
        name = getattr(model, "name_or_path", None) or "<in-memory>"
        cfg = HFPolicyConfig(model=str(name), **kwargs)
        device = next(model.parameters()).device
        obj._setup(cfg, model.eval(), tokenizer, device)
        return obj

    def _setup(self, cfg: HFPolicyConfig, model: Any, tokenizer: Any, device: torch.device) -> None:
        self.config = cfg
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.prompt_format: PromptFormat = resolve_prompt_format(
            cfg.prompt_format, tokenizer, local_dir(cfg.model)
        )
        cache_device = cfg.prefix_cache_device
        self.prefix_cache = PrefixKVCache(cfg.prefix_cache_tokens, cache_device)
        self._num_parameters = count_parameters(model)
        self.cost = module_cost(model, model.config)
        self.eos_ids = _eos_ids(model, tokenizer)
        vocab = model.get_output_embeddings().weight.shape[0]
        self._watch = DelimiterWatch(tokenizer, vocab)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._max_positions = getattr(model.config.get_text_config(), "max_position_embeddings",
                                      None)
        self._prompts = PromptBuilder(self.prompt_format, tokenizer)

    @property
    def computes_on_host_cpu(self) -> bool:
        """Whether the model runs on this machine's CPU (the driver's ``auto`` schedule keeps
        two such backends in lock-step rounds rather than computing at once)."""
        return self.device.type == "cpu"

    @property
    def num_parameters(self) -> int:
        """Parameter count, for the FLOP estimate."""
        return self._num_parameters

    def clear_caches(self) -> None:
        """Drop every cached prefix KV (e.g. between benchmark runs that must start cold)."""
        self.prefix_cache.clear()

    # ----------------------------------------------------------------------------- prompts
    def prompt_text(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> str:
        """The exact text fed to the model for ``question`` and the steps taken so far."""
        return self._prompts.text(question, steps, delimiter)

    @property
    def context_tokens(self) -> int | None:
        """The model's context length in tokens (None when its config does not say)."""
        return self._max_positions

    def prompt_ids(self, question: str, steps: Sequence[str], delimiter: str = "\n\n") -> list[int]:
        """The prompt's token ids."""
        return self._prompts.ids(question, steps, delimiter)

    def _prepare(self, index: int, req: GenerationRequest) -> _Prepared:
        ids = self.prompt_ids(req.question, req.steps, req.sampling.delimiter)
        max_new = generation_budget(index, len(ids), req.sampling.max_new_tokens, self._max_positions)
        seed = req.seed if req.seed is not None else secrets.randbits(63)
        return _Prepared(index, req, ids, normalise_seed(seed), max_new)

    # ---------------------------------------------------------------------------- generate
    @torch.inference_mode()
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One :class:`Generation` with ``request.n`` samples per request, in order."""
        prepared = [self._prepare(i, r) for i, r in enumerate(requests)]
        results: list[Generation | None] = [None] * len(prepared)
        for group in self._groups(sorted(prepared, key=lambda p: len(p.ids))):
            self._run_group(group, results)
        return results  # type: ignore[return-value]

    def _groups(self, prepared: list[_Prepared]) -> list[list[_Prepared]]:
        """Consecutive length-sorted requests whose padded prefill fits the token budget."""
        groups: list[list[_Prepared]] = []
        cur: list[_Prepared] = []
        for p in prepared:
            width = max([len(q.ids) for q in cur] + [len(p.ids)])
            if cur and (len(cur) + 1) * width > self.config.max_batch_tokens:
                groups.append(cur)
                cur = []
            cur.append(p)
        if cur:
            groups.append(cur)
        return groups

    def _run_group(self, group: list[_Prepared], results: list[Generation | None]) -> None:
        try:
            pre = self._prefill(group)
        except Exception as err:
            if not is_oom(err) or len(group) == 1:
                raise
            free_accelerator_memory(self.device)
            half = len(group) // 2
            self._run_group(group[:half], results)
            self._run_group(group[half:], results)
            return
        rows = [_RowState(g, s) for g, p in enumerate(group) for s in range(p.request.n)]
        outputs: dict[tuple[int, int], StepOutput] = {}
        width = pre.mask.shape[1]
        longest = max(p.max_new for p in group)
        chunk = max(1, self.config.max_batch_tokens // (width + longest))
        for start in range(0, len(rows), chunk):
            self._decode_with_retry(pre, group, rows[start : start + chunk], outputs)
        for g, p in enumerate(group):
            states = [r for r in rows if r.group_pos == g]
            samples = tuple(outputs[(g, s)] for s in range(p.request.n))
            results[p.index] = Generation(
                samples=samples,
                prompt_tokens_computed=pre.computed[g],
                prompt_tokens_cached=pre.cached[g],
                generated_tokens=sum(len(r.ids) for r in states),
            )

    def _decode_with_retry(self, pre: _Prefill, group: list[_Prepared], rows: list[_RowState],
                           outputs: dict[tuple[int, int], StepOutput]) -> None:
        try:
            self._decode(pre, group, rows, outputs)
        except Exception as err:
            if not is_oom(err) or len(rows) == 1:
                raise
            free_accelerator_memory(self.device)
            for r in rows:
                r.ids.clear()
                r.logprobs.clear()
                outputs.pop((r.group_pos, r.sample), None)
            half = len(rows) // 2
            self._decode_with_retry(pre, group, rows[:half], outputs)
            self._decode_with_retry(pre, group, rows[half:], outputs)

    # ----------------------------------------------------------------------------- prefill
    def _forward(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 past: Any) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         past_key_values=past, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def _prefill(self, group: list[_Prepared]) -> _Prefill:
        use_cache = self.prefix_cache.max_tokens > 0
        hits = [
            self.prefix_cache.lookup(p.ids, max_len=len(p.ids) - 1) if use_cache else (0, None)
            for p in group
        ]
        cached = [c for c, _ in hits]
        new = [len(p.ids) - c for p, c in zip(group, cached)]
        c_w, m_w = max(cached), max(new)
        b = len(group)
        input_ids = torch.full((b, m_w), self._pad_id, dtype=torch.long)
        positions = torch.zeros((b, m_w), dtype=torch.long)
        mask = torch.zeros((b, c_w + m_w), dtype=torch.long)
        for i, p in enumerate(group):
            c, m = cached[i], new[i]
            input_ids[i, m_w - m :] = torch.tensor(p.ids[c:], dtype=torch.long)
            positions[i, m_w - m :] = torch.arange(c, c + m)
            mask[i, c_w - c : c_w] = 1
            mask[i, c_w + m_w - m :] = 1
        like = next((kv for _, kv in hits if kv is not None), None)
        past = pack_rows([kv for _, kv in hits], c_w, like=like, room=m_w)  # new KV lands in place
        input_ids, positions, mask = (t.to(self.device) for t in (input_ids, positions, mask))
        logits = self._forward(input_ids, mask, positions, past)
        if use_cache:
            check_plain_cache(past)
            for i, p in enumerate(group):
                c, m = cached[i], new[i]
                cols = torch.cat([torch.arange(c_w - c, c_w), torch.arange(c_w + m_w - m, c_w + m_w)])
                self.prefix_cache.store(p.ids, row_kv(past, i, cols.to(self.device)))
        return _Prefill(past, mask, logits, new, cached)

    # ------------------------------------------------------------------------------ decode
    def _decode(self, pre: _Prefill, group: list[_Prepared], rows: list[_RowState],
                outputs: dict[tuple[int, int], StepOutput]) -> None:
        dev = self.device
        src = torch.tensor([r.group_pos for r in rows], device=dev)
        limits = [group[r.group_pos].max_new for r in rows]
        steps = max(limits)
        past = gather_cache(pre.past, src, room=steps)  # decoded KV lands in place, no copy per step
        mask = pre.mask.index_select(0, src)
        logits = pre.logits.index_select(0, src)
        reqs = [group[r.group_pos].request for r in rows]
        next_pos = torch.tensor([len(group[r.group_pos].ids) for r in rows], device=dev)
        temperature = torch.tensor([q.sampling.temperature for q in reqs], device=dev,
                                   dtype=torch.float32)
        top_p = torch.tensor([q.sampling.top_p for q in reqs], device=dev, dtype=torch.float32)
        keys = row_keys(np.array([group[r.group_pos].seed for r in rows], dtype=np.uint64),
                        np.array([r.sample for r in rows], dtype=np.uint64))
        live = list(range(len(rows)))  # batch position -> index into rows
        done = [False] * len(rows)
        for t in range(steps):
            u = torch.from_numpy(uniforms(keys, t)).to(dev)
            tokens, lps = choose_tokens(logits, temperature, top_p, u)
            tok_list, lp_list = tokens.tolist(), lps.tolist()
            for j, ri in enumerate(live):
                if done[ri]:
                    continue
                out = self._advance(rows[ri], reqs[ri], limits[ri], tok_list[j], lp_list[j])
                if out is not None:
                    outputs[(rows[ri].group_pos, rows[ri].sample)] = out
                    done[ri] = True
            alive = [j for j, ri in enumerate(live) if not done[ri]]
            if not alive:
                return
            if len(live) - len(alive) >= max(1, int(len(live) * self.config.compact_fraction)):
                sel = torch.tensor(alive, device=dev)
                past.batch_select_indices(sel)
                mask, tokens, next_pos, temperature, top_p = (
                    x.index_select(0, sel) for x in (mask, tokens, next_pos, temperature, top_p)
                )
                keys = keys[alive]
                live = [live[j] for j in alive]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            logits = self._forward(tokens[:, None], mask, next_pos[:, None], past)
            next_pos = next_pos + 1
        raise RuntimeError("decode loop ended with unfinished rows")  # pragma: no cover

    def _advance(self, row: _RowState, req: GenerationRequest, limit: int, tok: int, lp: float
                 ) -> StepOutput | None:
        """Append one token to a sample; return its output when the sample is finished."""
        row.ids.append(tok)
        row.logprobs.append(lp)
        sp = req.sampling
        if tok in self.eos_ids:
            ids = row.ids[:-1]
            return _output(decode(self.tokenizer, ids), ids, row.logprobs[:-1], Finish.EOS)
        if req.stop_at_step and self._watch.may_complete(sp.delimiter)[tok]:
            text = decode(self.tokenizer, row.ids)
            end = find_step_end(text, sp.delimiter)
            if end >= 0:
                cut = cut_at(self.tokenizer, row.ids, end, text)
                n = cut.n_tokens
                return _output(cut.text, row.ids[:n], row.logprobs[:n], Finish.STEP)
        if len(row.ids) >= limit:
            return _output(decode(self.tokenizer, row.ids), row.ids, row.logprobs, Finish.LENGTH)
        return None


def _output(text: str, ids: list[int], logprobs: list[float], finish: Finish) -> StepOutput:
    """A finished sample from its kept ids and their per-token log-probabilities (aligned), whose
    sum is the sample's ``logprob``."""
    lps = tuple(float(lp) for lp in logprobs)
    return StepOutput(text, tuple(ids), float(sum(lps)), finish, lps)


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """End-of-sequence ids from the generation config and the tokenizer."""
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos is not None:
        ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)
