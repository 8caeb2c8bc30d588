"""The driver's fast ScoreRequest constructor builds exactly what the dataclass constructor does."""

from __future__ import annotations

import dataclasses

import pytest

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
