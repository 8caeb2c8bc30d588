"""The settings of the transformers PRM scorer (:class:`~prmsearch.scorers.hf.HFPRMScorer`) and
the layout rule they default to, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

LAYOUTS = ("auto", "padded", "packed")

#: ``layout="auto"`` packs models at least this wide on a CPU. Measured: the embedded PRM (hidden
#: 128) scores 8% slower packed (its attention, sliced per sequence, costs more than the padding it
#: saves); Qwen2.5-0.5B (hidden 896) 1.45-2.05x faster. The crossover between them is not measured.
PACKING_MIN_HIDDEN = 512
#: The default of ``HFPRMConfig.shared_prefix_tokens``: a prefix that several inputs of one call
#: share beyond their cached KV runs once first when it adds at least this many tokens to each (a
#: forward of its own costs a little by itself)
MIN_SHARED_PREFIX = 16


def packs_by_default(can_pack: bool, device_type: str, hidden_size: int) -> bool:
    """Whether ``layout="auto"`` packs: on a CPU, for a model that can, when its linear layers
    dominate (hidden size >= :data:`PACKING_MIN_HIDDEN`). On an accelerator padding stays."""
    return can_pack and device_type == "cpu" and hidden_size >= PACKING_MIN_HIDDEN


@dataclass(frozen=True)
class HFPRMConfig:
    """Settings of :class:`HFPRMScorer`, validated at construction.

    Attributes:
        model: Hub id or local folder of the PRM.
        family: PRM family name (``qwen-prm``, ``math-shepherd``, ``rlhflow``, ``skywork``,
            ``token-cls``); it fixes the input layout, never guessed from the model id.
        device: ``None`` = CUDA when available else CPU.
        dtype: ``None`` = bfloat16 on CUDA, float32 on CPU.
        trust_remote_code: allow the folder's Python code (only the plain transformers
            families use it; the head families never need it).
        max_batch_tokens: bound on padded tokens per forward (rows x width).
        packed_row_tokens: bound on the tokens of one packed row (``layout`` packed). Rows of
            600-3,127 tokens ran at the same tokens/s on a CPU; far longer rows only make the
            elementwise passes spill out of the caches.
        prefix_cache_tokens: bound on tokens whose KV is kept for reuse; 0 disables it.
        shared_prefix_tokens: a prefix that several inputs of one call share beyond their cached
            KV (the question under N whole solutions or under a beam's first steps) runs once
            first when it adds at least this many tokens to each; 0 turns that off. Needs the
            prefix cache.
        score_cache_entries: bound on cached step scores; 0 disables score caching.
        attn_implementation: ``"sdpa"`` or ``"eager"`` (passed to ``from_pretrained``).
        causal: whether the model is causal (enables caching); ``None`` = decide from the
            family (always causal except a ``token-cls`` model whose type is a masked LM).
        head_prefix: checkpoint prefix of the value head (skywork; default ``v_head.summary``).
        layout: how a forward lays out its sequences: ``"padded"`` (rows padded to the
            longest), ``"packed"`` (end to end in one row, each attending only to itself; see
            :mod:`prmsearch.engines.packed_attention`), or ``"auto"``: packed on a CPU for
            causal models that support it and are wide enough for packing to pay
            (:func:`packs_by_default`), padded on an accelerator.
    """

    model: str
    family: str
    device: str | None = None
    dtype: str | None = None
    trust_remote_code: bool = False
    max_batch_tokens: int = 16384
    packed_row_tokens: int = 2048
    prefix_cache_tokens: int = 32768
    shared_prefix_tokens: int = MIN_SHARED_PREFIX
    score_cache_entries: int = 200_000
    attn_implementation: str | None = "sdpa"
    causal: bool | None = None
    head_prefix: str | None = None
    layout: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a Hub id or a folder, got {self.model!r}")
        for name in ("max_batch_tokens", "packed_row_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        for name in ("prefix_cache_tokens", "score_cache_entries", "shared_prefix_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        if self.attn_implementation not in (None, "sdpa", "eager"):
            raise ValueError(
                "attn_implementation must be 'sdpa', 'eager' or None, got "
                f"{self.attn_implementation!r}"
            )
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
