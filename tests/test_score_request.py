"""The driver's fast ScoreRequest and GenerationRequest constructors build exactly what the dataclass
constructors do."""

from __future__ import annotations

import dataclasses

import pytest

from prmsearch.policies.base import GenerationRequest, SamplingParams, generation_request
from prmsearch.scorers.base import ScoreRequest, path_score_request


def test_fast_request_equals_the_constructors_and_stays_frozen():
    fast = path_score_request("What is 2 + 3?", ("2 + 3 = 5", "\\boxed{5}"))
    slow = ScoreRequest("What is 2 + 3?", ("2 + 3 = 5", "\\boxed{5}"))
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.token_logprobs is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.steps = ()  # type: ignore[misc]
    moved = dataclasses.replace(fast, steps=("5",))
    assert moved == ScoreRequest("What is 2 + 3?", ("5",))


def test_fast_request_is_a_plain_score_request():
    fast = path_score_request("q", ())
    assert type(fast) is ScoreRequest and dataclasses.asdict(fast) == {
        "question": "q", "steps": (), "token_logprobs": None,
    }


def test_fast_generation_request_equals_the_constructors():
    sampling = SamplingParams(temperature=0.7, max_new_tokens=64)
    fields = dict(question="q", steps=("a", "b"), n=3, sampling=sampling, seed=11,
                  stop_at_step=False, logprobs=False)
    fast = generation_request(**fields)
    slow = GenerationRequest(**fields)
    assert type(fast) is GenerationRequest and fast == slow and hash(fast) == hash(slow)
    assert repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.n = 4  # type: ignore[misc]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n must be an int >= 1"):
            generation_request(**{**fields, "n": bad})
