"""A PRM-free baseline scorer: the policy's own confidence in the steps.

A step's score is the lowest probability the policy gave any token of the solution so far
(the step delimiters between steps included), so a path is as strong as its least likely token.
It needs no trained PRM, which makes it the bar a trained PRM has to clear (see ARITH-NOTES:
on the arithmetic domain it is a strong verifier, because the policy rarely makes an error it
is sure of). Every request is one forward pass over the whole path; nothing is cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from prmsearch.engines.loading import (
    count_parameters,
    load_tokenizer,
    module_cost,
    quiet_loading,
    resolve_device,
    resolve_dtype,
)
from prmsearch.engines.prompt_formats import resolve_prompt_format
from prmsearch.scorers.base import ScoreRequest, StepScores


class PolicyConfidenceScorer:
    """Scores steps by the minimum token probability under a causal LM (usually the policy)."""

    def __init__(
        self,
        model: str,
        *,
        prompt_format: str = "auto",
        delimiter: str = "\n\n",
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 32,
    ) -> None:
        from transformers import AutoModelForCausalLM

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = resolve_device(device)
        self.tokenizer = load_tokenizer(model)
        with quiet_loading():
            self.model = (
                AutoModelForCausalLM.from_pretrained(model, dtype=resolve_dtype(dtype, self.device))
                .to(self.device)
                .eval()
            )
        self.format = resolve_prompt_format(prompt_format, self.tokenizer, model)
        self.delimiter = delimiter
        self.batch_size = batch_size
        self._parameters = count_parameters(self.model)
        # reads every token's probability: the output head runs at every token
        self.cost = module_cost(self.model, self.model.config, logits_everywhere=True)

    @property
    def num_parameters(self) -> int:
        return self._parameters

    def _encode(self, request: ScoreRequest) -> tuple[list[int], int, list[int]]:
        """Token ids, the first solution token and the last token index of each step."""
        header = self.format.header(self.tokenizer, request.question)
        text = header + self.delimiter.join(request.steps)
        encoded = self.tokenizer(
            text, add_special_tokens=self.format.add_special_tokens, return_offsets_mapping=True
        )
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
        ends, cursor = [], len(header)
        for step in request.steps:
            cursor += len(step)
            ends.append(max(i for i, (a, _) in enumerate(offsets) if a < cursor))
            cursor += len(self.delimiter)
        first = next(i for i, (_, b) in enumerate(offsets) if b > len(header))
        return ids, max(1, first), ends

    @torch.inference_mode()
    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One forward pass per request (batched), cumulative minimum token probability per step."""
        out: list[StepScores] = []
        for start in range(0, len(requests), self.batch_size):
            batch = [self._encode(r) for r in requests[start : start + self.batch_size]]
            width = max(len(ids) for ids, _, _ in batch)
            pad = self.tokenizer.pad_token_id or 0
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (ids, _, _) in enumerate(batch):
                input_ids[row, : len(ids)] = torch.tensor(ids)
                mask[row, : len(ids)] = 1
            logits = self.model(
                input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)
            ).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            token_logp = logp.gather(-1, input_ids[:, 1:, None].to(self.device))[..., 0].cpu().numpy()
            for row, (ids, first, ends) in enumerate(batch):
                probs = np.exp(token_logp[row, first - 1 : len(ids) - 1])
                running = np.minimum.accumulate(probs)
                scores = np.array([running[end - first] for end in ends], dtype=np.float64)
                out.append(StepScores(np.clip(scores, 0.0, 1.0), tokens_computed=len(ids)))
        return out


def policy_confidence(model: str, **kwargs: Any) -> PolicyConfidenceScorer:
    """Factory registered as the ``policy-confidence`` scorer."""
    return PolicyConfidenceScorer(model, **kwargs)
