"""The Policy contract: batched generation of the next reasoning step (or a whole solution).

A policy owns its prompt format and tokenizer; the search engine only hands it the question,
the steps taken so far and sampling parameters, and reads back text, token ids, logprobs and
how many prompt tokens had to be computed versus served from a cache.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from prmsearch.backend_errors import ContextTooLong
from prmsearch.registry import Registry

DEFAULT_DELIMITER = "\n\n"


class Finish(str, enum.Enum):
    """Why a sample stopped: at the step delimiter, at end-of-sequence, or at the token limit."""

    STEP = "step"
    EOS = "eos"
    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample one step.

    Attributes:
        temperature: softmax temperature; 0 means greedy decoding.
        top_p: nucleus mass in (0, 1].
        max_new_tokens: token limit for one step (or for a whole solution when the request
            does not stop at steps).
        delimiter: text that ends a step; it is not part of the returned step text.
    """

    temperature: float = 0.8
    top_p: float = 1.0
    max_new_tokens: int = 256
    delimiter: str = DEFAULT_DELIMITER

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number, got {self.temperature!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not isinstance(self.delimiter, str) or not self.delimiter:
            raise ValueError(f"delimiter must be a non-empty string, got {self.delimiter!r}")


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """Ask for ``n`` continuations of one partial solution.

    Attributes:
        question: the problem text, unformatted (the policy applies its prompt format).
        steps: the steps already taken, without delimiters.
        n: number of independent samples.
        sampling: temperature, top-p, token limit and delimiter.
        seed: per-request seed; the same request with the same seed gives the same samples.
        stop_at_step: stop each sample at the delimiter (one step) when True; when False the
            sample runs to end-of-sequence or the token limit (a whole solution, delimiters
            included in the text).
        logprobs: the caller reads the samples' log-probabilities. False lets a backend skip
            computing them (a server's log-softmax over the vocabulary costs about a tenth of
            its tokens/s): its samples then carry ``logprob`` NaN and no ``token_logprobs``.
            A backend that gets them for free may return them anyway; the samples themselves
            (text, ids, finish) must not depend on it.
    """

    question: str
    steps: tuple[str, ...]
    n: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop_at_step: bool = True
    logprobs: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be an int >= 1, got {self.n!r}")


@dataclass(frozen=True, slots=True)
class StepOutput:
    """One sampled continuation.

    Attributes:
        text: the step text without the trailing delimiter (or the whole solution text).
        token_ids: the generated token ids, delimiter and EOS tokens excluded where the
            backend can separate them.
        logprob: the summed log-probability of ``token_ids`` under the sampling policy; NaN
            when the request did not ask for log-probabilities and the backend skipped them.
        finish: why the sample stopped.
        token_logprobs: the log-probability of each token of ``token_ids``, aligned with it, so
            that they sum to ``logprob``; empty when the backend cannot give them. Confidence
            measures over windows of tokens (``confidence_vote``) read them.
    """

    text: str
    token_ids: tuple[int, ...]
    logprob: float
    finish: Finish
    token_logprobs: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # O(1) on purpose (samples are built in the decode loop): the sum is left to the builders
        if self.token_logprobs and len(self.token_logprobs) != len(self.token_ids):
            raise ValueError(
                f"token_logprobs must hold one value per token of token_ids or none, got "
                f"{len(self.token_logprobs)} for {len(self.token_ids)} tokens"
            )


@dataclass(frozen=True, slots=True)
class Generation:
    """The ``n`` samples of one request and what their shared prompt cost.

    ``prompt_tokens_computed + prompt_tokens_cached`` is the prompt length once (the prefill
    is shared by the ``n`` samples); ``generated_tokens`` counts every sample's tokens,
    including delimiter and EOS tokens that the backend had to compute;
    ``prompt_tokens_recomputed`` counts prompt tokens prefilled again within the request (e.g. a
    sample continued past a blank step), so that compute is charged too.
    """

    samples: tuple[StepOutput, ...]
    prompt_tokens_computed: int
    prompt_tokens_cached: int = 0
    generated_tokens: int | None = None
    prompt_tokens_recomputed: int = 0

    def __post_init__(self) -> None:
        counts = (self.prompt_tokens_computed, self.prompt_tokens_cached, self.prompt_tokens_recomputed)
        if min(counts) < 0:
            raise ValueError(
                "prompt token counts must be >= 0, got "
                f"computed={self.prompt_tokens_computed} cached={self.prompt_tokens_cached} "
                f"recomputed={self.prompt_tokens_recomputed}"
            )

    def sample_tokens(self) -> list[int]:
        """Tokens decoded per sample, for the FLOP formula. When the backend counted more than
        the samples hold (e.g. a blank step continued), the rest is charged as one more run."""
        lengths = [len(s.token_ids) for s in self.samples]
        if self.generated_tokens is None:
            return lengths
        extra = self.generated_tokens - sum(lengths)
        return [*lengths, extra] if extra > 0 else lengths

    @property
    def tokens_generated(self) -> int:
        """Generated tokens charged to this request (the backend's count when it gave one)."""
        if self.generated_tokens is not None:
            return self.generated_tokens
        return sum(len(s.token_ids) for s in self.samples)


def generation_budget(index: int, prompt_tokens: int, max_new_tokens: int, context: int | None) -> int:
    """Tokens a request may generate: its limit, cut to what the model's context has left.

    Generation then stops at the context end with finish "length"; input is never dropped, so
    a prompt that alone fills the context is a `ContextTooLong` naming request ``index``.
    """
    if prompt_tokens == 0:
        raise ValueError(f"request {index}: the prompt tokenised to no tokens")
    if context is None:
        return max_new_tokens
    if prompt_tokens >= context:
        raise ContextTooLong(
            f"request {index}: the prompt has {prompt_tokens} tokens, the model context only "
            f"{context}; shorten the question or the path (nothing is truncated)"
        )
    return min(max_new_tokens, context - prompt_tokens)


class TokenizerLock:
    """A lock around a backend's fast tokenizer (not safe across threads: a policy that takes
    parallel calls encodes and decodes under it); a copy or unpickled one is a fresh lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> TokenizerLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def __reduce__(self) -> tuple[type[TokenizerLock], tuple[()]]:
        return (TokenizerLock, ())


@runtime_checkable
class Policy(Protocol):
    """Anything that turns a batch of requests into a batch of generations, in order.

    A backend declares its optional hooks (parallel calls, computing on this machine's CPU, a
    domain note) by subclassing `PolicyBackend`. It may also carry ``context_tokens`` (the
    model's context length) with ``prompt_ids(question, steps)``, which let a server refuse an
    over-long question before it searches.
    """

    @property
    def num_parameters(self) -> int:
        """Parameter count. A backend that knows its model's shape also carries ``cost``
        (a :class:`prmsearch.costs.ModelCost`) for the FLOP formula; without it the count is
        used as a dense model's (attention and output head not counted)."""
        ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Return one ``Generation`` with ``request.n`` samples per request, in order.

        An exception is contained by the driver (retried problem by problem, then recorded per
        problem); one with a true ``backend_unreachable`` attribute fails the whole batch at once.
        """
        ...


POLICIES: Registry[Policy] = Registry("policy")


def register_policy(name: str, factory, summary: str = "", *, replace: bool = False) -> None:
    """Register a policy backend factory (a callable or a lazy ``"module:attr"`` string)."""
    POLICIES.register(name, factory, summary, replace=replace)


def make_policy(name: str, /, **kwargs) -> Policy:
    """Build a registered policy backend by name, e.g. ``make_policy("hf", model=path)``."""
    return POLICIES.make(name, **kwargs)
