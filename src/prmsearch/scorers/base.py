"""The Scorer contract: batched process-reward scoring of partial solutions.

A scorer owns its PRM family's input format (chat template, separator token, label tokens)
and validates it when loaded. It returns one probability in [0, 1] per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from prmsearch.backend_errors import ContextTooLong, MalformedReply
from prmsearch.backend_hooks import ScorerBackend
from prmsearch.registry import Registry


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """Score every step of one (partial) solution to ``question``.

    ``token_logprobs``: the policy's own log-probability of each generated token, one tuple per
    step (a whole solution's tokens may all sit on its last step). The driver fills it only for
    a scorer whose ``reads_policy_logprobs`` attribute is true; other scorers get None.
    """

    question: str
    steps: tuple[str, ...]
    token_logprobs: tuple[tuple[float, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class StepScores:
    """The step scores of one request and what they cost.

    Attributes:
        scores: float64 array with one probability in [0, 1] per step.
        tokens_computed: PRM tokens run through the model for this request.
        tokens_cached: PRM tokens whose result was reused from an earlier call.
    """

    scores: np.ndarray
    tokens_computed: int = 0
    tokens_cached: int = 0


class ScoreCountError(MalformedReply):
    """A scorer returned a different number of scores than there are steps."""


class ContextLengthError(ContextTooLong):
    """A request is longer than the PRM's context (steps are never silently truncated). The
    driver scores such a batch request by request and ends each too-long path as an unscored,
    truncated leaf, so one long path never fails its whole problem."""


def check_prm_length(index: int, family: str, tokens: int, max_length: int | None) -> None:
    """Refuse request ``index`` when its ``tokens`` (up to the last step) exceed the PRM's
    context: a `ContextLengthError` naming the sizes (nothing is ever truncated)."""
    if max_length is not None and tokens > max_length:
        raise ContextLengthError(
            f"request {index}: the {family} input has {tokens} tokens up to the last step, more "
            f"than the PRM context of {max_length}; score fewer or shorter steps (steps are never "
            "silently truncated)"
        )


@runtime_checkable
class Scorer(Protocol):
    """Anything that scores a batch of step sequences, in order."""

    @property
    def num_parameters(self) -> int:
        """Parameter count. A backend that knows its model's shape also carries ``cost``
        (a :class:`prmsearch.costs.ModelCost`) for the FLOP formula."""
        ...

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """Return one ``StepScores`` per request, with ``len(request.steps)`` scores."""
        ...


def check_scores(request: ScoreRequest, result: StepScores, new: int | None = None) -> list[float]:
    """Validate one result against its request and return the scores as Python floats: all of
    them, or with ``new`` the last ``new`` only (the steps a search writes; only they must be
    probabilities).

    A count mismatch means the PRM's step tags misaligned with the steps: that is an error,
    never something to pad or truncate silently.
    """
    raw = result.scores
    values = raw.tolist() if isinstance(raw, np.ndarray) else [float(v) for v in raw]
    if len(values) != len(request.steps) or (values and isinstance(values[0], list)):
        raise ScoreCountError(
            f"scorer returned {np.shape(raw)} scores for {len(request.steps)} steps; the PRM's "
            "step separators must match the steps one to one (check the separator token and "
            "that no step contains it)"
        )
    if new is not None:
        values = values[len(values) - new :]
    total = sum(values)  # NaN anywhere makes the sum NaN
    if values and (total != total or min(values) < 0.0 or max(values) > 1.0):
        raise ValueError(f"step scores must be probabilities in [0, 1], got {values}")
    return values


class NoScorer(ScorerBackend):
    """The scorer of a search whose strategy reads no step scores (greedy, self-consistency):
    nothing is loaded, nothing is charged, and a call is an error that names the fix."""

    num_parameters = 0

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        if not requests:
            return []
        raise RuntimeError("this search was built without a PRM (its strategy reads no step scores); "
                           "give a scorer (--prm, or scorer=...) to search with one that does")


SCORERS: Registry[Scorer] = Registry("scorer")

#: The scorer that runs any PRM family on transformers (each family's own name is an alias of it,
#: bound to that family).
HF_PRM = "hf-prm"


def register_scorer(name: str, factory, summary: str = "", *, replace: bool = False) -> None:
    """Register a scorer (PRM family or backend) factory by name."""
    SCORERS.register(name, factory, summary, replace=replace)


def make_scorer(name: str, /, **kwargs) -> Scorer:
    """Build a registered scorer by name, e.g. ``make_scorer("qwen-prm", model=path)``."""
    return SCORERS.make(name, **kwargs)
