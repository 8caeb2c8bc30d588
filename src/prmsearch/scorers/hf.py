"""The transformers PRM scorer: batched, incremental step scoring for every PRM family.

Pipeline for a batch of :class:`~prmsearch.scorers.base.ScoreRequest`:

1. The family's :class:`~prmsearch.scorers.formats.PRMFormat` checks the text and gives token
   ids plus one read position per step; ids after the last read position are dropped (these
   PRMs are causal, so nothing later can change a score).
2. Score cache: a step's score depends only on the tokens up to its read position, so scores
   are cached under a digest of exactly those tokens (bounded LRU). Fully cached requests cost
   nothing, and identical inputs within one call (sibling steps with the same text) run once.
3. KV prefix cache: for the rest, the longest cached token prefix supplies its attention KV,
   so a beam step pays only for its new tokens. Every scored sequence's KV is stored.
4. Requests are sorted by new-token count and grouped under a token budget; each group is one
   forward with layout ``[pad][cached][new][pad]`` (right padding of the new tokens, attention
   mask, explicit positions; the packed cache has room for the new KV, written in place). The
   head runs only at the read positions, its outputs are upcast to float32 before the
   softmax/sigmoid.

Token counts reported per request: ``tokens_computed`` = tokens run through the model for it,
``tokens_cached`` = tokens whose result came from either cache (or from an identical input in
the same call). Non-causal token classifiers
(BERT-like) get no caching (their scores depend on later tokens).

Out-of-memory on an accelerator: a failed group is retried in two halves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from prmsearch.backend_hooks import ScorerBackend
from prmsearch.engines.kv_cache import (
    PrefixKVCache,
    SeqKV,
    check_plain_cache,
    pack_rows,
    row_kv,
)
from prmsearch.engines.loading import (
    count_parameters,
    free_accelerator_memory,
    is_oom,
    load_tokenizer,
    module_cost,
    quiet_loading,
    resolve_device,
    resolve_dtype,
)
from prmsearch.engines.packed_attention import (
    PackedPlan,
    packed_attention_on,
    supports_packing,
)
from prmsearch.engines.shared_prefix import shared_prefix_runs
from prmsearch.engines.token_keys import prefix_digests
from prmsearch.scorers.base import ScoreRequest, StepScores, check_prm_length
from prmsearch.scorers.formats import PRMFormat, make_format
from prmsearch.scorers.heads import BaseWithHead, load_base_with_head, load_qwen_prm
from prmsearch.scorers.hf_config import (
    LAYOUTS,
    MIN_SHARED_PREFIX,
    PACKING_MIN_HIDDEN,
    HFPRMConfig,
    packs_by_default,
)

#: the settings are defined in `prmsearch.scorers.hf_config` and importable from here too
__all__ = [
    "LAYOUTS",
    "MIN_SHARED_PREFIX",
    "PACKING_MIN_HIDDEN",
    "HFPRMConfig",
    "HFPRMScorer",
    "load_prm_model",
    "packs_by_default",
]


class _Runner:
    """Uniform access to a PRM model: hidden states, then the head at read positions."""

    def __init__(self, kind: str, model: Any, label_ids: tuple[int, ...] = ()) -> None:
        self.kind = kind
        self.model = model
        if kind in ("qwen", "value"):
            self.base, self._head = model.base, model.head
        elif kind == "lm":
            self.base = model.base_model
            lm_head = model.get_output_embeddings()
            vocab = lm_head.weight.shape[0]
            bad = [i for i in label_ids if not 0 <= i < vocab]
            if bad:
                raise ValueError(f"label ids {bad} are outside the model's vocabulary of {vocab}")
            idx = torch.tensor(label_ids, device=lm_head.weight.device)
            self._w = lm_head.weight.index_select(0, idx)
            bias = getattr(lm_head, "bias", None)
            self._b = bias.index_select(0, idx) if bias is not None else None
        elif kind == "token-cls":
            self.base = model
        else:  # pragma: no cover - formats define the kinds
            raise ValueError(f"unknown model kind {kind!r}")

    @property
    def config(self) -> Any:
        return self.base.config

    def hidden(self, input_ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor,
               past: Any, plan: PackedPlan | None = None) -> torch.Tensor:
        kwargs: dict[str, Any] = {"attention_mask": mask, "position_ids": positions}
        if past is not None:
            kwargs.update(past_key_values=past, use_cache=True)
        if plan is not None:
            with packed_attention_on(self.base):
                out = self.base(input_ids=input_ids, use_cache=False, packed_plan=plan, **kwargs)
        else:
            out = self.base(input_ids=input_ids, **kwargs)
        return out.logits if self.kind == "token-cls" else out.last_hidden_state

    def head(self, h: torch.Tensor) -> torch.Tensor:
        if self.kind == "token-cls":
            return h.float()
        if self.kind == "lm":
            out = h @ self._w.T
            if self._b is not None:
                out = out + self._b
            return out.float()
        weight = next(self._head.parameters())
        return self._head(h.to(weight.dtype)).float()


@dataclass
class _Job:
    """The part of one request that needs the model."""

    index: int
    ids: list[int]
    positions: list[int]
    digests: list[bytes]
    missing: list[int]
    cached: int
    kv: SeqKV | None
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: tokens of a shared prefix run for this job's group and charged to it (see
    #: ``HFPRMScorer._run_shared_prefixes``), counted as computed rather than cached
    prefix_computed: int = 0


def _is_masked_lm_type(config: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return getattr(config, "model_type", None) in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def load_prm_model(cfg: HFPRMConfig, fmt_head: str, device: torch.device,
                   dtype: torch.dtype) -> Any:
    """Load the model a family's format reads from (see :class:`_Runner` kinds)."""
    attn = cfg.attn_implementation
    if fmt_head == "qwen":
        return load_qwen_prm(cfg.model, dtype=dtype, device=device, attn_implementation=attn)
    if fmt_head == "value":
        from transformers import AutoConfig

        hidden = AutoConfig.from_pretrained(cfg.model).hidden_size
        net = load_base_with_head(cfg.model, torch.nn.Linear(hidden, 1),
                                  cfg.head_prefix or "v_head.summary", dtype=dtype,
                                  device=device, attn_implementation=attn)
        net.head.float()  # Skywork runs its value head in float32
        return net
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    auto = AutoModelForCausalLM if fmt_head == "lm" else AutoModelForTokenClassification
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": cfg.trust_remote_code}
    if attn is not None:
        kwargs["attn_implementation"] = attn
    with quiet_loading():
        model = auto.from_pretrained(cfg.model, **kwargs)
    # transformers wraps PreTrainedModel.to in functools.wraps(Module.to): mypy reads it unbound
    return model.to(device).eval()  # type: ignore[arg-type]


def _score_head(kind: str, net: Any) -> str | None:
    """The attribute name of the score head charged per read position (None: the LM head)."""
    if kind in ("qwen", "value"):
        return "head"
    if kind == "token-cls":
        names = {name.split(".")[0] for name, _ in net.named_parameters()}
        return "score" if "score" in names else "classifier"
    return None


class HFPRMScorer(ScorerBackend):
    """A :class:`~prmsearch.scorers.base.Scorer` running a PRM family with transformers."""

    def __init__(self, model: str | Path, family: str, *, tokenizer: Any = None,
                 format_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = HFPRMConfig(model=str(model), family=family, **kwargs)
        device = resolve_device(cfg.device)
        dtype = resolve_dtype(cfg.dtype, device)
        if tokenizer is None:
            tokenizer = load_tokenizer(cfg.model, trust_remote_code=cfg.trust_remote_code)
        fmt = make_format(family, tokenizer, **(format_options or {}))
        net = load_prm_model(cfg, fmt.head, device, dtype)
        self._setup(cfg, fmt, net, device)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, family: str, *,
                   format_options: dict[str, Any] | None = None, **kwargs: Any) -> HFPRMScorer:
        """Wrap an in-memory model (e.g. a :class:`BaseWithHead` being trained)."""
        obj = cls.__new__(cls)
        cfg = HFPRMConfig(model="<in-memory>", family=family, **kwargs)
        fmt = make_format(family, tokenizer, **(format_options or {}))
        obj._setup(cfg, fmt, model.eval(), next(model.parameters()).device)
        return obj

    def _setup(self, cfg: HFPRMConfig, fmt: PRMFormat, net: Any, device: torch.device) -> None:
        self.config = cfg
        self.format = fmt
        self.model = net
        self.device = device
        self.tokenizer = fmt.tokenizer
        expected = {"qwen": BaseWithHead, "value": BaseWithHead}.get(fmt.head)
        if expected is not None and not isinstance(net, expected):
            raise TypeError(f"{cfg.family} needs a BaseWithHead model, got {type(net).__name__}")
        self._runner = _Runner(fmt.head, net, fmt.label_ids)
        self._check_head_shape()
        base_config = self._runner.config
        self.causal = cfg.causal if cfg.causal is not None else not (
            fmt.head == "token-cls" and _is_masked_lm_type(base_config)
        )
        caching = self.causal
        self.prefix_cache = PrefixKVCache(cfg.prefix_cache_tokens if caching else 0)
        self._score_limit = cfg.score_cache_entries if caching else 0
        self._scores: OrderedDict[bytes, float] = OrderedDict()
        self._num_parameters = count_parameters(net)
        self.cost = module_cost(net, base_config, score_head=_score_head(fmt.head, net))
        text_cfg = base_config.get_text_config() if hasattr(base_config, "get_text_config") else \
            base_config
        self.max_length: int | None = getattr(text_cfg, "max_position_embeddings", None)
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad) if pad is not None else 0
        self.packed = self._choose_layout(cfg.layout, text_cfg)

    def _choose_layout(self, layout: str, text_cfg: Any) -> bool:
        """Whether forwards pack their sequences (see :class:`HFPRMConfig` ``layout``)."""
        full_attention = all(t == "full_attention" for t in
                             getattr(text_cfg, "layer_types", None) or ("full_attention",))
        can_pack = self.causal and full_attention and supports_packing(self._runner.base)
        if layout == "packed" and not can_pack:
            raise ValueError(
                f"{self.config.family}: this model cannot run packed forwards (it needs a causal "
                "decoder with full attention in every layer that uses transformers' attention "
                "interface); pass layout='padded'"
            )
        hidden = int(getattr(text_cfg, "hidden_size", 0) or 0)
        wide_enough = packs_by_default(can_pack, self.device.type, hidden)
        return layout == "packed" or (layout == "auto" and wide_enough)

    def _check_head_shape(self) -> None:
        """Head output width must match the family: 2 logits, 1 value, or 2 labels."""
        kind = self.format.head
        if kind == "qwen":
            width = self.model.head[-1].out_features
            want = 2
        elif kind == "value":
            width, want = self.model.head.out_features, 1
        elif kind == "token-cls":
            width, want = int(self.model.config.num_labels), 2
        else:
            return
        if width != want:
            raise ValueError(
                f"{self.config.family}: the model head gives {width} outputs per token, the "
                f"family needs {want}; is this the right family for this checkpoint?"
            )

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
        """Drop cached scores and KV."""
        self._scores.clear()
        self.prefix_cache.clear()

    # ------------------------------------------------------------------------------- score
    def encode(self, request: ScoreRequest) -> tuple[list[int], list[int]]:
        """The family layout of one request: token ids and one read position per step."""
        self.format.check_text(request.question, request.steps)
        enc = self.format.encode(request.question, request.steps)
        return enc.ids, enc.positions

    @torch.inference_mode()
    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One :class:`StepScores` per request, in order (one probability per step)."""
        results: list[StepScores | None] = [None] * len(requests)
        jobs: list[_Job] = []
        first_job: dict[bytes, _Job] = {}  # identical inputs in one call run once
        duplicates: list[tuple[int, _Job]] = []
        for i, req in enumerate(requests):
            if not req.steps:
                results[i] = StepScores(np.zeros(0, dtype=np.float64), 0, 0)
                continue
            ids, positions = self.encode(req)
            ids = ids[: positions[-1] + 1]
            check_prm_length(i, self.config.family, len(ids), self.max_length)
            digests = prefix_digests(ids, [p + 1 for p in positions]) if self._score_limit else []
            got = [self._scores.get(d) for d in digests] if digests else [None] * len(positions)
            missing = [j for j, s in enumerate(got) if s is None]
            if not missing:
                for d in digests:
                    self._scores.move_to_end(d)
                results[i] = StepScores(np.array(got, dtype=np.float64), 0, len(ids))
                continue
            key = np.asarray(ids, dtype=np.int64).tobytes()
            if key in first_job:
                duplicates.append((i, first_job[key]))
                continue
            limit = positions[missing[0]]
            cached, kv = self.prefix_cache.lookup(ids, max_len=limit) if self.causal else (0, None)
            job = _Job(i, ids, positions, digests, missing, cached, kv)
            job.scores = np.array([s if s is not None else np.nan for s in got], dtype=np.float64)
            jobs.append(job)
            first_job[key] = job
        self._run_shared_prefixes(jobs)
        jobs.sort(key=lambda j: len(j.ids) - j.cached)
        for group in self._groups(jobs):
            self._run_group(group)
        for job in jobs:
            results[job.index] = StepScores(
                job.scores, len(job.ids) - job.cached + job.prefix_computed, job.cached - job.prefix_computed
            )
        for i, job in duplicates:  # charged as cached: nothing ran for them
            results[i] = StepScores(job.scores.copy(), 0, len(job.ids))
        return results  # type: ignore[return-value]

    def _run_shared_prefixes(self, jobs: list[_Job]) -> None:
        """Run once each prefix that several of a call's jobs share beyond their cached KV (the
        question under N whole solutions, or under every first step of a beam), store its KV and
        start those jobs from it. The prefix's tokens are charged to the group's first job."""
        least = self.config.shared_prefix_tokens
        if not self.causal or self.prefix_cache.max_tokens == 0 or least == 0 or len(jobs) < 2:
            return
        found = shared_prefix_runs([j.ids for j in jobs], [j.cached for j in jobs],
                                   [j.positions[j.missing[0]] for j in jobs], least)
        if not found:
            return
        prefixes = []
        for shared in found:
            ids = jobs[shared.members[0]].ids[: shared.length]
            cached, kv = self.prefix_cache.lookup(ids, max_len=shared.length - 1)
            prefixes.append(_Job(-1, ids, [], [], [], cached, kv))
        for group in self._groups(sorted(prefixes, key=lambda j: len(j.ids) - j.cached)):
            self._run_group(group)
        for shared, prefix in zip(found, prefixes):
            for rank, member in enumerate(shared.members):
                job = jobs[member]
                cached, kv = self.prefix_cache.lookup(job.ids, max_len=job.positions[job.missing[0]])
                if cached > job.cached:
                    job.cached, job.kv = cached, kv
                if rank == 0:
                    job.prefix_computed = min(len(prefix.ids) - prefix.cached, job.cached)

    def _groups(self, jobs: list[_Job]) -> list[list[_Job]]:
        """Consecutive jobs under the token budget: padded rows x width, or packed new tokens
        (at most ``packed_row_tokens`` in one row)."""
        cfg = self.config
        budget = min(cfg.max_batch_tokens, cfg.packed_row_tokens) if self.packed else \
            cfg.max_batch_tokens
        groups: list[list[_Job]] = []
        cur: list[_Job] = []
        c_w = m_w = total = 0
        for job in jobs:
            new = len(job.ids) - job.cached
            c2, m2, t2 = max(c_w, job.cached), max(m_w, new), total + new
            cost = t2 if self.packed else (len(cur) + 1) * (c2 + m2)
            if cur and cost > budget:
                groups.append(cur)
                cur, c2, m2, t2 = [], job.cached, new, new
            cur.append(job)
            c_w, m_w, total = c2, m2, t2
        if cur:
            groups.append(cur)
        return groups

    def _run_group(self, group: list[_Job]) -> None:
        try:
            if self.packed:
                self._forward_packed(group)
            else:
                self._forward_group(group)
        except Exception as err:
            if not is_oom(err) or len(group) == 1:
                raise
            free_accelerator_memory(self.device)
            half = len(group) // 2
            self._run_group(group[:half])
            self._run_group(group[half:])

    def _forward_group(self, group: list[_Job]) -> None:
        b = len(group)
        c_w = max(j.cached for j in group)
        news = [len(j.ids) - j.cached for j in group]
        m_w = max(news)
        input_ids = torch.full((b, m_w), self._pad_id, dtype=torch.long)
        positions = torch.zeros((b, m_w), dtype=torch.long)
        mask = torch.zeros((b, c_w + m_w), dtype=torch.long)
        for r, job in enumerate(group):
            c, m = job.cached, news[r]
            input_ids[r, :m] = torch.tensor(job.ids[c:], dtype=torch.long)
            positions[r, :m] = torch.arange(c, c + m)
            mask[r, c_w - c : c_w] = 1
            mask[r, c_w : c_w + m] = 1
        store = self.prefix_cache.max_tokens > 0
        past: DynamicCache | None
        if c_w > 0:
            like = next(j.kv for j in group if j.kv is not None)
            past = pack_rows([j.kv for j in group], c_w, like=like, room=m_w)  # appends in place
        else:
            past = DynamicCache() if store else None
        dev = self.device
        hidden = self._runner.hidden(input_ids.to(dev), mask.to(dev), positions.to(dev), past)
        rows, cols = [], []
        for r, job in enumerate(group):
            for j in job.missing:
                rows.append(r)
                cols.append(job.positions[j] - job.cached)
        if rows:  # a shared prefix's forward reads nothing: it only stores KV
            picked = hidden[torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)]
            self._write_scores(group, self.format.probabilities(self._runner.head(picked)))
        if store and past is not None:
            check_plain_cache(past)
            for r, job in enumerate(group):
                c, m = job.cached, news[r]
                cols_kv = torch.cat([torch.arange(c_w - c, c_w), torch.arange(c_w, c_w + m)])
                self.prefix_cache.store(job.ids, row_kv(past, r, cols_kv.to(dev)))

    def _forward_packed(self, group: list[_Job]) -> None:
        news = [len(j.ids) - j.cached for j in group]
        store = self.prefix_cache.max_tokens > 0
        plan = PackedPlan(news, [j.kv for j in group], keep_kv=store)
        ids = np.concatenate([np.asarray(j.ids[j.cached :], dtype=np.int64) for j in group])
        positions = np.concatenate([np.arange(j.cached, len(j.ids)) for j in group])
        dev = self.device
        hidden = self._runner.hidden(torch.from_numpy(ids)[None].to(dev), None,
                                     torch.from_numpy(positions)[None].to(dev), None, plan)
        cols = [plan.starts[r] + job.positions[j] - job.cached
                for r, job in enumerate(group) for j in job.missing]
        if cols:  # a shared prefix's forward reads nothing: it only stores KV
            picked = hidden[0, torch.tensor(cols, device=dev)]
            self._write_scores(group, self.format.probabilities(self._runner.head(picked)))
        if store:
            for r, job in enumerate(group):
                self.prefix_cache.store(job.ids, plan.sequence_kv(r))

    def _write_scores(self, group: list[_Job], probs_t: torch.Tensor) -> None:
        """Put one forward's probabilities (jobs' missing steps, in order) into the jobs."""
        probs = probs_t.double().cpu().numpy()
        k = 0
        for job in group:
            for j in job.missing:
                job.scores[j] = probs[k]
                if self._score_limit:
                    self._remember(job.digests[j], float(probs[k]))
                k += 1

    def _remember(self, digest: bytes, score: float) -> None:
        self._scores[digest] = score
        self._scores.move_to_end(digest)
        while len(self._scores) > self._score_limit:
            self._scores.popitem(last=False)
