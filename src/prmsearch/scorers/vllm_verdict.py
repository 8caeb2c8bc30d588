"""The vLLM scorer of the PRM families read from a language-model head (the generative verifier,
Math-Shepherd, RLHFlow): the verdict token's probability as one-token generations.

Each step's score is the model's next-token distribution over the family's two label tokens at
the step's read position (``P(Yes)`` over Yes/No for the verifier). On vLLM that is a generation
of ONE token from the prompt ``ids[: position + 1]`` with ``logprob_token_ids`` set to the two
labels: vLLM returns their log-probabilities under the raw model distribution, and the family's
own read-out turns them into the score, so the transformers and vLLM scorers agree up to the
engine's dtype.

Reuse: the input ids come from the same :class:`~prmsearch.scorers.formats.PRMFormat` as the
transformers scorer, so step ``j``'s prompt is a prefix of step ``j + 1``'s. Steps already scored
are served from a bounded cache of exact scores (keyed by a digest of the tokens each depends
on); the rest go to vLLM in waves, the first missing step of every request in one ``generate``
call, then the second, and so on, so each wave finds the blocks of the one before in vLLM's
prefix cache (on here, unlike the pooling scorer: a generation needs no hidden state of a cached
token). A search round scores one new step a path, i.e. one wave whose prefix the last round
left in the cache. Tokens vLLM served from its cache are reported as ``tokens_cached``.
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
    safetensors_parameters,
)
from prmsearch.scorers.base import MalformedReply, ScoreRequest, StepScores, check_prm_length
from prmsearch.scorers.formats import PRM_FORMATS, families_with_head
from prmsearch.scorers.score_cache import step_keys
from prmsearch.scorers.vllm_common import InProcessVLLMScorer


class VerdictLogprobError(MalformedReply):
    """vLLM returned no log-probability for a label token (the engine must honour
    ``logprob_token_ids``)."""


class VLLMVerdictScorer(InProcessVLLMScorer):
    """A :class:`~prmsearch.scorers.base.Scorer` running an LM-head PRM family on vLLM.

    Args:
        model: local folder or Hub id of a causal LM (for ``verifier``: any instruct model).
        family: a PRM family read from an LM head (``verifier``, ``math-shepherd``, ``rlhflow``).
        tokenizer: a loaded transformers tokenizer (default: the model's own).
        format_options: options of the family's input format (``system``, ``good``, ``bad``...).
        score_cache_entries: bound on cached step scores (0 disables the cache).
        **engine: :class:`~prmsearch.engines.vllm_engine.VLLMEngineConfig` fields; when the
            policy shares the GPU give both an explicit ``gpu_memory_utilization``.
    """

    def __init__(self, model: str | Path, family: str = "verifier", *, tokenizer: Any = None,
                 format_options: dict[str, Any] | None = None, score_cache_entries: int = 200_000,
                 **engine: Any) -> None:
        if PRM_FORMATS.get(family).head != "lm":  # an unknown family lists the known ones
            raise ValueError(
                f"the vllm verdict scorer runs the PRM families read from an LM head "
                f"({', '.join(families_with_head('lm'))}), got {family!r}; qwen-prm runs on vllm-qwen-prm, "
                "the others on the transformers scorer"
            )
        cfg = engine_config(str(model), engine)
        if engine:
            raise ValueError(f"unknown VLLMVerdictScorer arguments {sorted(engine)}")
        self._set_up(cfg, family, tokenizer, format_options, score_cache_entries)
        from vllm import SamplingParams

        self._params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                                      logprob_token_ids=list(self.format.label_ids))
        self.llm = build_llm(cfg)
        self.max_length = max_model_len(self.llm)
        folder = model_folder(cfg.model)
        self._num_parameters = safetensors_parameters(folder)
        self.cost = folder_cost(folder) or ModelCost.dense(self._num_parameters)

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One :class:`StepScores` per request, in order; the missing steps go to vLLM in waves
        of one step a request (see the module docstring)."""
        scores: list[list[float | None]] = []
        computed = [0] * len(requests)
        cached = [0] * len(requests)
        missing: list[list[tuple[int, list[int]]]] = []  # per request: (step, prompt ids)
        keys: list[list[bytes]] = []
        for i, req in enumerate(requests):
            if not req.steps:
                scores.append([])
                missing.append([])
                keys.append([])
                continue
            ids, positions = self.encode(req)
            check_prm_length(i, self.family, len(ids), self.max_length)
            step_key = step_keys(ids, positions) if self._cache.enabled else []
            known = self._cache.known(step_key) if step_key else [None] * len(positions)
            scores.append(list(known))
            keys.append(step_key)
            todo = [(j, ids[: p + 1]) for j, (p, s) in enumerate(zip(positions, known, strict=True))
                    if s is None]
            missing.append(todo)
            if not todo:
                cached[i] = len(ids)
        for wave in range(max((len(m) for m in missing), default=0)):
            batch = [(i, m[wave]) for i, m in enumerate(missing) if len(m) > wave]
            for (i, (j, prompt)), out in zip(batch, self._generate([p for _, (_, p) in batch]),
                                             strict=True):
                scores[i][j] = self._read(out)
                hit = min(int(getattr(out, "num_cached_tokens", 0) or 0), len(prompt))
                computed[i] += len(prompt) - hit
                cached[i] += hit
        results = []
        for i, row in enumerate(scores):
            values = np.array(row, dtype=np.float64)
            if keys[i] and missing[i]:
                self._cache.store(keys[i], values.tolist())
            results.append(StepScores(values, computed[i], cached[i]))
        return results

    def _generate(self, prompts: list[list[int]]) -> list[Any]:
        from vllm.inputs import TokensPrompt

        # vllm needs Python >= 3.11: read as 3.10, the NotRequired keys of its TokensPrompt count as required
        return self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], self._params,  # type: ignore[typeddict-item]
                                 use_tqdm=False)

    def _read(self, out: Any) -> float:
        """The family's score from the label tokens' log-probabilities of one generation."""
        import torch

        entries = out.outputs[0].logprobs if out.outputs else None
        if not entries:
            raise VerdictLogprobError(f"{self.family}: vLLM returned no logprobs for a verdict")
        first = entries[0]
        try:
            values = [float(first[t].logprob) for t in self.format.label_ids]
        except (KeyError, TypeError, AttributeError) as exc:
            raise VerdictLogprobError(
                f"{self.family}: vLLM returned logprobs for {sorted(first)}, not the label tokens "
                f"{list(self.format.label_ids)}; this vLLM must support logprob_token_ids"
            ) from exc
        return float(self.format.probabilities(torch.tensor([values], dtype=torch.float64))[0])


def vllm_lm_prm(model: str | Path, family: str, **kwargs: Any) -> VLLMVerdictScorer:
    """Any LM-head PRM family on vLLM (registered as ``vllm-<family>``, e.g. ``vllm-verifier``)."""
    return VLLMVerdictScorer(model, family, **kwargs)
