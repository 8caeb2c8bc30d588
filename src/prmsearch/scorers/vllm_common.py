"""What the two in-process vLLM scorers share: the engine's lifetime, the step-score cache and
the cut of a request's tokens after its last read position."""

from __future__ import annotations

from typing import Any

from prmsearch.backend_hooks import ScorerBackend
from prmsearch.engines.open_engines import ClosedOnExit
from prmsearch.engines.vllm_engine import VLLMEngineConfig, on_gpu, shutdown_llm
from prmsearch.scorers.base import ScoreRequest
from prmsearch.scorers.formats import make_format
from prmsearch.scorers.score_cache import StepScoreCache


class InProcessVLLMScorer(ClosedOnExit, ScorerBackend):
    """Base of a scorer that runs its model on an ``LLM`` in this process.

    A subclass calls :meth:`_set_up` in its ``__init__``, then sets ``llm`` (the engine) and
    ``_num_parameters``.
    """

    llm: Any
    format: Any
    _cache: StepScoreCache
    _num_parameters: int

    def _set_up(self, cfg: VLLMEngineConfig, family: str, tokenizer: Any,
                format_options: dict[str, Any] | None, score_cache_entries: int) -> None:
        """The engine settings, the family's input format on the model's tokenizer (loaded when
        none is given) and the step-score cache."""
        if not isinstance(score_cache_entries, int) or score_cache_entries < 0:
            raise ValueError(f"score_cache_entries must be an int >= 0, got {score_cache_entries!r}")
        if tokenizer is None:
            from prmsearch.engines.loading import load_tokenizer

            tokenizer = load_tokenizer(cfg.model, trust_remote_code=cfg.trust_remote_code)
        self.config = cfg
        self.family = family
        self.format = make_format(family, tokenizer, **(format_options or {}))
        self.tokenizer = tokenizer
        self._cache = StepScoreCache(score_cache_entries)

    @property
    def computes_on_host_cpu(self) -> bool:
        """Whether the engine computes on this machine's CPU (no CUDA device): the driver's
        ``auto`` schedule keeps two such backends in lock-step rounds, since two engines on the
        same cores only slow each other down."""
        return not on_gpu()

    @property
    def num_parameters(self) -> int:
        """Parameter count (from the checkpoint headers), for the FLOP estimate."""
        return self._num_parameters

    def close(self) -> None:
        """Stop the engine's processes."""
        shutdown_llm(self.llm)

    def clear_caches(self) -> None:
        """Forget cached scores (vLLM's own prefix cache is left alone)."""
        self._cache.clear()

    def encode(self, request: ScoreRequest) -> tuple[list[int], list[int]]:
        """Token ids (cut after the last read position) and one read position per step."""
        self.format.check_text(request.question, request.steps)
        enc = self.format.encode(request.question, request.steps)
        return enc.ids[: enc.positions[-1] + 1], enc.positions
