"""Bad input: unknown names list the known ones; invalid configs name the field and the value."""

from __future__ import annotations

import pytest

from prmsearch import SamplingParams, make_policy, make_scorer, make_strategy
from prmsearch.registry import UnknownNameError


def test_unknown_strategy_lists_known_names():
    known = "known strategy names: adaptive_vote, beam, best_of_n, confidence_vote, dvts"
    with pytest.raises(UnknownNameError, match=known):
        make_strategy("beam_serch")


def test_unknown_backends_list_known_names():
    with pytest.raises(UnknownNameError, match=r"unknown policy 'nope'.*hf"):
        make_policy("nope")
    with pytest.raises(UnknownNameError, match="unknown scorer 'nope'"):
        make_scorer("nope")


def test_unknown_strategy_option_lists_options():
    with pytest.raises(ValueError, match=r"no option.*beam_width.*options are:.*width"):
        make_strategy("beam", beam_width=4)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("beam", {"n": 0}, "n must be an int >= 1, got 0"),
        ("beam", {"n": 4, "width": 8}, r"width must be <= n \(4\), got 8"),
        ("beam", {"n": 6, "width": 4}, r"n must be a multiple of width \(4\), got n=6"),
        ("dvts", {"n": 6, "width": 4}, r"n must be a multiple of width"),
        (
            "best_of_n",
            {"aggregation": "median"},
            "aggregation must be one of min, last, prod, mean; got 'median'",
        ),
        ("best_of_n", {"selection": "vote"}, "selection must be one of argmax, majority, weighted"),
        ("mcts", {"c_puct": -1}, "c_puct must be a number > 0, got -1"),
        ("mcts", {"final": "best"}, "final must be one of visits, value"),
        ("particle_filter", {"temperature": 0}, "temperature must be a number > 0"),
        ("rebase", {"n": 2.5}, "n must be an int >= 1, got 2.5"),
    ],
)
def test_invalid_strategy_config(name, options, message):
    with pytest.raises(ValueError, match=message):
        make_strategy(name, **options)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", -0.5, "temperature must be >= 0, got -0.5"),
        ("top_p", 1.5, r"top_p must be in \(0, 1\], got 1.5"),
        ("max_new_tokens", 0, "max_new_tokens must be an int >= 1, got 0"),
        ("delimiter", "", "delimiter must be a non-empty string"),
    ],
)
def test_invalid_sampling(field, value, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**{field: value})
