"""The vLLM PRM scorer: the ``qwen-prm`` family through vLLM's pooling runner.

A ``Qwen2ForProcessRewardModel`` folder is served with ``runner="pooling"`` and a pooler whose
``step_tag_id`` is the family's separator token; ``LLM.encode(..., pooling_task=
"token_classify")`` then returns one row of class probabilities per separator, i.e. one row per
step. The input ids come from the same :class:`~prmsearch.scorers.formats.QwenPRMFormat` as the
transformers scorer (chat template, ``<extra_0>`` after every step, ids after the last separator
dropped), so both backends score identical tokens and return identical :class:`StepScores`.

Reuse: a bounded cache of step scores keyed by a digest of exactly the tokens a score depends
on (these PRMs are causal) skips requests whose steps were all scored before (reported as
``tokens_cached``); the rest go to vLLM in ONE ``encode`` call. vLLM's own prefix caching is
OFF by default here: token-level pooling needs the hidden state of every step tag, and vLLM
0.32 does not compute hidden states for tokens served from cached blocks (it warns that prefix
caching is not supported for this runner). Turning it on is allowed; a misaligned result is
then caught as a :class:`ScoreCountError`, never returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.costs import ModelCost, folder_cost
from prmsearch.engines.vllm_engine import (
    build_llm,
    engine_config,
    max_model_len,
    model_folder,
    read_config,
    safetensors_parameters,
)
from prmsearch.scorers.base import ScoreCountError, ScoreRequest, StepScores, check_prm_length
from prmsearch.scorers.score_cache import step_keys
from prmsearch.scorers.vllm_common import InProcessVLLMScorer

SUPPORTED_FAMILIES = ("qwen-prm",)
QWEN_PRM_ARCH = "Qwen2ForProcessRewardModel"


class VLLMPRMScorer(InProcessVLLMScorer):
    """A :class:`~prmsearch.scorers.base.Scorer` running a ``qwen-prm`` PRM on vLLM.

    Args:
        model: local folder or Hub id of a ``Qwen2ForProcessRewardModel`` checkpoint.
        family: PRM family; only ``qwen-prm`` runs on vLLM's pooling runner (the other
            families run on the transformers scorer).
        tokenizer: a loaded transformers tokenizer (default: the model's own).
        format_options: options of the family's input format (``separator``, ``system``...).
        score_cache_entries: bound on cached step scores (0 disables the cache).
        **engine: :class:`~prmsearch.engines.vllm_engine.VLLMEngineConfig` fields; when the
            policy shares the GPU give both an explicit ``gpu_memory_utilization``.
    """

    def __init__(self, model: str | Path, family: str = "qwen-prm", *, tokenizer: Any = None,
                 format_options: dict[str, Any] | None = None, score_cache_entries: int = 200_000,
                 **engine: Any) -> None:
        if family not in SUPPORTED_FAMILIES:
            raise ValueError(
                f"the vllm scorer runs PRM families {list(SUPPORTED_FAMILIES)}, got {family!r}; "
                "use the transformers scorer (make_scorer(family, model=...)) for the others"
            )
        engine.setdefault("enable_prefix_caching", False)  # see the module docstring
        cfg = engine_config(str(model), engine)
        if engine:
            raise ValueError(f"unknown VLLMPRMScorer arguments {sorted(engine)}")
        folder = model_folder(cfg.model)
        archs = read_config(folder).get("architectures") or []
        if folder is not None and QWEN_PRM_ARCH not in archs:
            raise ValueError(
                f"{cfg.model} declares architectures {archs}, not [{QWEN_PRM_ARCH!r}]; the "
                "qwen-prm family needs a Qwen2.5-Math-PRM style checkpoint"
            )
        self._set_up(cfg, family, tokenizer, format_options, score_cache_entries)
        from vllm.config import PoolerConfig

        self.llm = build_llm(cfg, runner="pooling",
                             pooler_config=PoolerConfig(step_tag_id=self.format.sep_id))
        self.max_length = max_model_len(self.llm)
        self._num_parameters = safetensors_parameters(folder)
        self.cost = folder_cost(folder, score_head="score") or ModelCost.dense(self._num_parameters)

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One :class:`StepScores` per request, in order, from ONE ``LLM.encode`` call."""
        from vllm.inputs import TokensPrompt

        results: list[StepScores | None] = [None] * len(requests)
        todo: list[tuple[int, list[int], list[bytes]]] = []
        for i, req in enumerate(requests):
            if not req.steps:
                results[i] = StepScores(np.zeros(0, dtype=np.float64), 0, 0)
                continue
            ids, positions = self.encode(req)
            check_prm_length(i, self.family, len(ids), self.max_length)
            keys = step_keys(ids, positions) if self._cache.enabled else []
            cached_scores = self._cache.lookup(keys)
            if cached_scores is not None:
                results[i] = StepScores(cached_scores, 0, len(ids))
                continue
            todo.append((i, ids, keys))
        if todo:
            # vllm needs Python >= 3.11: read as 3.10, the NotRequired keys of its TokensPrompt
            # count as required
            outputs = self.llm.encode([TokensPrompt(prompt_token_ids=ids) for _, ids, _ in todo],  # type: ignore[typeddict-item]
                                      pooling_task="token_classify", use_tqdm=False)
            for (i, ids, keys), out in zip(todo, outputs, strict=True):
                scores = self._read(requests[i], out)
                if keys:
                    self._cache.store(keys, scores.tolist())
                cached = min(int(out.num_cached_tokens or 0), len(ids))
                results[i] = StepScores(scores, len(ids) - cached, cached)
        return results  # type: ignore[return-value]

    def _read(self, request: ScoreRequest, out: Any) -> np.ndarray:
        """The positive-class probability of every step from one pooling output."""
        data = out.outputs.data
        rows = np.asarray(data.float().cpu().numpy() if hasattr(data, "cpu") else data,
                          dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != len(request.steps) or rows.shape[1] < 2:
            raise ScoreCountError(
                f"{self.family}: vLLM returned scores of shape {rows.shape} for "
                f"{len(request.steps)} steps; the step separator must occur once per step"
            )
        return rows[:, self.format.positive_index].copy()


def vllm_qwen_prm(model: str | Path, **kwargs: Any) -> VLLMPRMScorer:
    """The ``qwen-prm`` family on vLLM (registered as ``vllm-qwen-prm``)."""
    return VLLMPRMScorer(model, "qwen-prm", **kwargs)
