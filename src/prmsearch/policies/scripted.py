"""A scripted policy that replays known steps: for unit tests of strategies and for measuring the
driver's own overhead with an instant backend. It is a real ``Policy`` (batched, seeded, with token
counts), only without a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from prmsearch.backend_hooks import PolicyBackend
from prmsearch.policies.base import Finish, Generation, GenerationRequest, StepOutput


@dataclass(frozen=True, slots=True)
class ScriptedStep:
    """One scripted continuation; ``finish`` defaults to EOS for steps with a boxed answer."""

    text: str
    finish: Finish | None = None
    logprob: float = -1.0

    @property
    def resolved_finish(self) -> Finish:
        if self.finish is not None:
            return self.finish
        return Finish.EOS if "\\boxed" in self.text else Finish.STEP


Script = Mapping[tuple[str, ...], Sequence["str | ScriptedStep"]]
ScriptFn = Callable[[str, tuple[str, ...], int, int], "str | ScriptedStep"]


def _as_step(item: str | ScriptedStep) -> ScriptedStep:
    return item if isinstance(item, ScriptedStep) else ScriptedStep(item)


def word_tokens(text: str) -> tuple[int, ...]:
    """Fake token ids: one per whitespace-separated word (stable, cheap)."""
    return tuple(len(word) for word in text.split())


def spread_logprob(text: str, logprob: float) -> tuple[float, ...]:
    """Per-token log-probabilities for :func:`word_tokens`: ``logprob`` shared evenly by the
    words, so that they sum to it (empty for a text without words)."""
    count = len(text.split())
    return (logprob / count,) * count if count else ()


class ScriptedPolicy(PolicyBackend):
    """Replays a step tree given as ``{steps_so_far: [next step, ...]}`` or as a function.

    Sample ``i`` of a request takes continuation ``(offset + i) % k`` of the ``k`` scripted ones,
    where ``offset`` is 0, or ``seed % k`` with ``vary_with_seed=True``. A function script is
    called as ``script(question, steps, sample_index, seed)``. With ``token_logprobs=True`` every
    sample also carries per-token log-probabilities: each step's ``logprob`` spread evenly over its
    words (:func:`spread_logprob`), so a whole solution's vary from step to step.
    """

    def __init__(
        self,
        script: Script | ScriptFn,
        *,
        num_parameters: int = 1_000_000,
        vary_with_seed: bool = False,
        token_logprobs: bool = False,
    ) -> None:
        self.script = script
        self._num_parameters = num_parameters
        self.vary_with_seed = vary_with_seed
        self.token_logprobs = token_logprobs
        self.calls: list[int] = []

    @property
    def num_parameters(self) -> int:
        return self._num_parameters

    def _next(self, question: str, steps: tuple[str, ...], index: int, seed: int) -> ScriptedStep:
        if callable(self.script):
            return _as_step(self.script(question, steps, index, seed))
        try:
            options = self.script[steps]
        except KeyError:
            raise KeyError(f"the script has no continuation after steps {list(steps)}") from None
        offset = seed % len(options) if self.vary_with_seed else 0
        return _as_step(options[(offset + index) % len(options)])

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Replay ``n`` continuations per request (whole solutions when not stopping at steps)."""
        self.calls.append(len(requests))
        out = []
        for request in requests:
            seed = request.seed or 0
            samples = []
            for i in range(request.n):
                if request.stop_at_step:
                    step = self._next(request.question, request.steps, i, seed)
                    lps = spread_logprob(step.text, step.logprob) if self.token_logprobs else ()
                    samples.append(
                        StepOutput(step.text, word_tokens(step.text), step.logprob, step.resolved_finish, lps)
                    )
                else:
                    samples.append(self._whole_solution(request, i, seed))
            prompt = len(request.question.split()) + sum(len(s.split()) for s in request.steps)
            out.append(Generation(tuple(samples), prompt_tokens_computed=prompt))
        return out

    def _whole_solution(self, request: GenerationRequest, index: int, seed: int) -> StepOutput:
        steps = request.steps
        texts: list[str] = []
        logprob = 0.0
        lps: list[float] = []
        finish = Finish.STEP
        while finish is Finish.STEP and len(texts) < 1000:
            step = self._next(request.question, steps, index, seed)
            texts.append(step.text)
            logprob += step.logprob
            lps.extend(spread_logprob(step.text, step.logprob))
            finish = step.resolved_finish
            steps = (*steps, step.text)
        text = request.sampling.delimiter.join(texts)
        ids = word_tokens(text)
        # none when they do not line up: a delimiter that is not whitespace glues the words of two
        # steps, and a step without words holds its logprob on no token
        whole = len(lps) == len(ids) and math.isclose(sum(lps), logprob, rel_tol=1e-9, abs_tol=1e-9)
        aligned = tuple(lps) if self.token_logprobs and whole else ()
        return StepOutput(text, ids, logprob, finish, aligned)
