"""Turning an engine's raw sample (ids, per-token logprobs, finish reason) into a StepOutput.

Shared by the vLLM, OpenAI-compatible and SGLang backends so that all of them cut steps exactly
as the transformers backend does: the generated ids are decoded, the step ends at the first
delimiter that ends a complete step (:func:`~prmsearch.policies.step_end.find_step_end`; an
engine that stopped at a delimiter inside an unfinished step is cut there all the same) and keeps
the fewest tokens covering its text (:func:`~prmsearch.policies.step_end.cut_at`); a trailing
EOS token is dropped. Those tokens are still generated (and charged), but they are not part of
``token_ids``, ``token_logprobs`` or ``logprob``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from prmsearch.policies.base import Finish, StepOutput
from prmsearch.policies.step_end import cut_at, decode, find_step_end


def step_output(
    tokenizer: Any,
    ids: Sequence[int],
    logprobs: Sequence[float] | None,
    *,
    stopped: bool,
    eos_ids: Collection[int],
    stop_at_step: bool,
    delimiter: str,
) -> StepOutput:
    """The :class:`StepOutput` of one finished sample.

    Args:
        tokenizer: the policy's transformers tokenizer (decodes ids exactly).
        ids: every generated id, delimiter and EOS included.
        logprobs: the model's log-probability of each id, or None when the request did not
            ask for them (the sample's ``logprob`` is then NaN and it has no ``token_logprobs``).
        stopped: the engine stopped the sample itself (stop string or stop token), as
            opposed to the token limit.
        eos_ids: end-of-sequence ids; a stopped sample ending in one finished with EOS.
        stop_at_step: the request asked for one step (a delimiter ends the sample).
        delimiter: the step delimiter.
    """
    ids = list(ids)
    if logprobs is None:
        lps = None
    elif len(logprobs) != len(ids):
        raise ValueError(f"got {len(logprobs)} logprobs for {len(ids)} tokens")
    else:
        lps = tuple(float(lp) for lp in logprobs)
    if stopped and ids and ids[-1] in eos_ids:
        body = ids[:-1]
        text = decode(tokenizer, body)
        if not stop_at_step or find_step_end(text, delimiter) < 0:
            return _kept(text, body, lps and lps[:-1], Finish.EOS)
    text = decode(tokenizer, ids)
    if stop_at_step:
        end = find_step_end(text, delimiter)
        if end < 0 and stopped:  # stopped at a delimiter inside an unfinished step: cut there anyway
            end = find_step_end(text, delimiter, complete=False)
        if end >= 0:
            n = cut_at(tokenizer, ids, end, text).n_tokens
            return _kept(text[:end], ids[:n], lps and lps[:n], Finish.STEP)
    finish = Finish.EOS if stopped else Finish.LENGTH
    return _kept(text, ids, lps, finish)


def _kept(text: str, ids: list[int], logprobs: tuple[float, ...] | None, finish: Finish) -> StepOutput:
    """The sample made of the kept tokens: their per-token log-probabilities travel with them and
    their sum is the sample's ``logprob`` (NaN without them)."""
    if logprobs is None:
        return StepOutput(text, tuple(ids), math.nan, finish)
    return StepOutput(text, tuple(ids), float(sum(logprobs)), finish, logprobs)


def is_blank_step(tokenizer: Any, ids: Sequence[int], delimiter: str) -> bool:
    """A sample stopped at a delimiter before its step was complete (blank so far, a heading
    alone, an open code block; engines that stop at the first occurrence of a stop string
    produce these; the caller continues them)."""
    return find_step_end(decode(tokenizer, list(ids)), delimiter) < 0
