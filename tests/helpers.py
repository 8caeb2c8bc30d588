"""Small builders for the strategy tests: a scripted step tree with fixed scores."""

from __future__ import annotations

import numpy as np

from prmsearch.policies.base import SamplingParams
from prmsearch.policies.scripted import ScriptedPolicy
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.driver import Driver, RunConfig


def synthetic_script(depth: int = 3, answers: int = 4):
    """A seeded, infinitely branching tree: ``depth`` steps, then a boxed answer."""

    def script(question, steps, index, seed):
        rng = np.random.default_rng([seed, index, len(steps)])
        if len(steps) >= depth:
            return f"so the result is \\boxed{{{int(rng.integers(answers))}}}"
        return f"step {len(steps)} value {int(rng.integers(100))}"

    return script


def synthetic_scores(question, steps):
    """A deterministic pseudo-score in (0, 1) for a path (by its last step's text)."""
    text = steps[-1]
    return (sum(map(ord, text)) * 7919 % 997) / 1000 + 0.001


def synthetic_backends(depth: int = 3):
    return ScriptedPolicy(synthetic_script(depth)), ScriptedScorer(synthetic_scores)


def run_one(policy, scorer, strategy, question="q", seed=0, **config):
    driver = Driver(policy, scorer, RunConfig(sampling=SamplingParams(), **config))
    (result,) = driver.run([question], strategy, [seed])
    return result, driver
