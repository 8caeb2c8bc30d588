"""A PRM-free baseline scorer: the policy's own confidence in the steps.

A step's score is read off the probabilities the policy gave the tokens of the solution so far,
in one of three ways (``aggregation``):

* ``mean`` (default): the geometric mean token probability of the path up to the step's end;
* ``min``: the lowest token probability so far (a path is as strong as its least likely
  token; strong on the arithmetic domain, but on real models it sinks to 0.03-0.1 at the first
  unlikely token of a long solution and then says little);
* ``last``: the geometric mean token probability of the step's own tokens.

It needs no trained PRM, which makes it the bar a trained PRM has to clear. Without a ``model``
it reads the log-probabilities the policy returned with each step (every backend returns them),
so it computes and costs nothing. With a ``model`` it runs that causal LM over each path (for a
policy whose server returns no log-probabilities, or to score with another model); only the
chosen tokens' log-probabilities are kept, computed a chunk of positions at a time, so memory
stays at ``chunk x vocabulary`` floats whatever the path length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from prmsearch.backend_hooks import ScorerBackend
from prmsearch.scorers.base import ScoreRequest, StepScores

AGGREGATIONS = ("mean", "min", "last")


def check_aggregation(aggregation: str) -> str:
    """``aggregation`` when it is one of :data:`AGGREGATIONS`; else a ValueError naming them."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}")
    return aggregation


def confidence_scores(step_logprobs: Sequence[Sequence[float]], aggregation: str) -> np.ndarray:
    """One score per step from each step's token log-probabilities (see the module docstring);
    a step with no tokens of its own scores as the path so far (1.0 before any token)."""
    out = np.empty(len(step_logprobs), dtype=np.float64)
    total, count, lowest = 0.0, 0, 0.0
    for k, lps in enumerate(step_logprobs):
        if lps:
            total += float(sum(lps))
            count += len(lps)
            lowest = min(lowest, float(min(lps)))
        if aggregation == "min":
            out[k] = math.exp(lowest)
        elif aggregation == "mean":
            out[k] = math.exp(total / count) if count else 1.0
        else:
            out[k] = math.exp(float(sum(lps)) / len(lps)) if lps else (out[k - 1] if k else 1.0)
    return np.clip(out, 0.0, 1.0)


class PolicyLogprobScorer(ScorerBackend):
    """Policy confidence from the log-probabilities the policy already returned (no model)."""

    @property
    def reads_policy_logprobs(self) -> bool:
        return True  # its whole input

    num_parameters = 0

    def __init__(self, *, aggregation: str = "mean") -> None:
        self.aggregation = check_aggregation(aggregation)

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        out = []
        for i, request in enumerate(requests):
            lps = request.token_logprobs
            if lps is None or len(lps) != len(request.steps):
                raise ValueError(
                    f"request {i}: policy-confidence without a model reads the policy's token "
                    "log-probabilities, which this request lacks; score inside a search (the driver "
                    "passes them), or give the scorer a model (model=... / --prm-arg model=DIR)"
                )
            out.append(StepScores(confidence_scores(lps, self.aggregation)))
        return out


class PolicyConfidenceScorer(ScorerBackend):
    """Policy confidence recomputed by running a causal LM (usually the policy) over each path."""

    def __init__(
        self,
        model: str,
        *,
        aggregation: str = "mean",
        prompt_format: str = "auto",
        delimiter: str = "\n\n",
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 8,
        chunk_tokens: int = 256,
    ) -> None:
        from transformers import AutoModelForCausalLM

        from prmsearch.engines.loading import (
            count_parameters,
            load_tokenizer,
            module_cost,
            quiet_loading,
            resolve_device,
            resolve_dtype,
        )
        from prmsearch.engines.prompt_formats import resolve_prompt_format

        for name, value in (("batch_size", batch_size), ("chunk_tokens", chunk_tokens)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.aggregation = check_aggregation(aggregation)
        self.device = resolve_device(device)
        self.tokenizer = load_tokenizer(model)
        with quiet_loading():
            # transformers wraps PreTrainedModel.to in functools.wraps(Module.to): mypy reads it unbound
            self.model = (
                AutoModelForCausalLM.from_pretrained(model, dtype=resolve_dtype(dtype, self.device))
                .to(self.device)  # type: ignore[arg-type]
                .eval()
            )
        self.format = resolve_prompt_format(prompt_format, self.tokenizer, model)
        self.delimiter = delimiter
        self.batch_size = batch_size
        self.chunk_tokens = chunk_tokens
        self._parameters = count_parameters(self.model)
        # reads every token's probability: the output head runs at every token
        self.cost = module_cost(self.model, self.model.config, logits_everywhere=True)

    @property
    def computes_on_host_cpu(self) -> bool:
        """Whether the model runs on this machine's CPU (the driver's ``auto`` schedule keeps
        two such backends in lock-step rounds rather than computing at once)."""
        return self.device.type == "cpu"

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

    def _token_logprobs(self, input_ids: Any, mask: Any, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """Each row's chosen-token log-probabilities over its span ``[first, end)`` of positions,
        the output head run a chunk of positions at a time (never the whole vocabulary at once)."""
        import torch

        hidden = self.model.base_model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        head = self.model.get_output_embeddings()
        rows = []
        for r, (first, end) in enumerate(spans):
            parts = []
            for a in range(first - 1, end - 1, self.chunk_tokens):
                b = min(a + self.chunk_tokens, end - 1)
                logits = head(hidden[r, a:b]).float()
                chosen = input_ids[r, a + 1 : b + 1]
                parts.append((logits.gather(-1, chosen[:, None])[:, 0] - torch.logsumexp(logits, -1)).cpu())
            rows.append(torch.cat(parts).numpy() if parts else np.zeros(0))
        return rows

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One forward pass per request (batched); scores by ``aggregation`` per step."""
        import torch

        out: list[StepScores] = []
        with torch.inference_mode():
            for start in range(0, len(requests), self.batch_size):
                batch = [self._encode(r) for r in requests[start : start + self.batch_size]]
                width = max(len(ids) for ids, _, _ in batch)
                pad = self.tokenizer.pad_token_id or 0
                input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, (ids, _, _) in enumerate(batch):
                    input_ids[row, : len(ids)] = torch.tensor(ids)
                    mask[row, : len(ids)] = 1
                spans = [(first, len(ids)) for ids, first, _ in batch]
                rows = self._token_logprobs(input_ids.to(self.device), mask.to(self.device), spans)
                for (ids, first, ends), lps in zip(batch, rows, strict=True):
                    bounds = [first, *[end + 1 for end in ends]]
                    per_step = [lps[a - first : b - first].tolist() for a, b in pairwise(bounds)]
                    scores = confidence_scores(per_step, self.aggregation)
                    out.append(StepScores(scores, tokens_computed=len(ids)))
        return out


def policy_confidence(model: str | None = None,
                      **kwargs: Any) -> PolicyConfidenceScorer | PolicyLogprobScorer:
    """Factory registered as the ``policy-confidence`` scorer: without ``model`` it reads the
    policy's own token log-probabilities (free); with one it recomputes them with that model."""
    if model is None:
        return PolicyLogprobScorer(**kwargs)
    return PolicyConfidenceScorer(model, **kwargs)
