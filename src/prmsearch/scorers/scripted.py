"""A scripted scorer with fixed step scores, for unit tests and overhead measurements."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from prmsearch.backend_hooks import ScorerBackend
from prmsearch.scorers.base import ScoreRequest, StepScores


class ScriptedScorer(ScorerBackend):
    """Scores each step by a lookup of its text (or a function of the path up to it).

    ``scores`` is ``{step_text: probability}`` (missing texts get ``default``) or a function
    ``fn(question, steps_up_to_and_including_this_one) -> probability``. Token counts are one
    token per word of every step scored, with nothing cached.
    """

    def __init__(
        self,
        scores: Mapping[str, float] | Callable[[str, tuple[str, ...]], float],
        *,
        default: float = 0.5,
        num_parameters: int = 1_000_000,
    ) -> None:
        self.scores = scores
        self.default = default
        self._num_parameters = num_parameters
        self.calls: list[int] = []

    @property
    def num_parameters(self) -> int:
        return self._num_parameters

    def _one(self, question: str, steps: tuple[str, ...]) -> float:
        if callable(self.scores):
            return float(self.scores(question, steps))
        return float(self.scores.get(steps[-1], self.default))

    def score(self, requests: Sequence[ScoreRequest]) -> list[StepScores]:
        """One score per step of every request."""
        self.calls.append(len(requests))
        out = []
        for request in requests:
            steps = request.steps
            values = np.array([self._one(request.question, steps[: i + 1]) for i in range(len(steps))])
            tokens = sum(len(s.split()) for s in steps)
            out.append(StepScores(values, tokens_computed=tokens))
        return out
