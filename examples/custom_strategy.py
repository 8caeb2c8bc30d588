"""A custom search strategy in under 40 lines: best-of-N that stops sampling once answers agree.

Shows the strategy protocol (`prmsearch.Expand` / `prmsearch.Choice`): a strategy is a frozen
config dataclass plus a generator function `algorithm(tree, config, rng)` that yields `Expand`
requests, receives the new nodes (already generated, written into the tree and scored by the
PRM), and returns a `Choice`. It never touches a backend, a tokenizer or I/O, so the driver
batches it across problems like a built-in. `register_strategy` makes it a name that `solve`,
`Searcher` and sweeps accept.

This one samples whole solutions `batch` at a time, up to `n`, and stops as soon as `agree` of
them reach the same answer; it returns the best-scored solution among those with the most common
answer (the PRM breaks ties between answers). Easy questions stop after one round, hard ones spend
the whole budget.

Run (about ten seconds on a CPU, no download):

    HF_HUB_OFFLINE=1 .venv/bin/python examples/custom_strategy.py
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from prmsearch import (
    ROOT,
    Choice,
    Expand,
    Searcher,
    SearchTree,
    canonical_answer,
    register_strategy,
    resolve_policy,
    resolve_scorer,
)
from prmsearch.arith import load_split
from prmsearch.tree import NO_GROUP


# ---- The strategy itself: 36 lines, from this comment to the register_strategy(...) call included.
@dataclass(frozen=True)
class EarlyStopVoteConfig:
    """Options: at most ``n`` solutions, ``batch`` per round, stop when ``agree`` share an answer."""

    n: int = 8
    batch: int = 2
    agree: int = 2

    def __post_init__(self) -> None:
        if not (1 <= self.batch <= self.n and self.agree >= 1):
            raise ValueError(f"need 1 <= batch <= n and agree >= 1, got {self}")


def early_stop_vote(
    tree: SearchTree, config: EarlyStopVoteConfig, rng: np.random.Generator
) -> Generator[Expand, list[list[int]], Choice]:
    """Sample whole solutions ``batch`` at a time until ``agree`` of them give the same answer."""
    leaves: list[int] = []
    votes: Counter[int] = Counter()  # answer group -> solutions with that answer
    while len(leaves) < config.n:
        (new_leaves,) = yield Expand(((ROOT, min(config.batch, config.n - len(leaves))),), full_solution=True)
        leaves.extend(new_leaves)
        votes.update(tree.answer_group[leaf] for leaf in new_leaves if tree.answer_group[leaf] != NO_GROUP)
        if max(votes.values(), default=0) >= config.agree:
            break
    top = max(votes.values(), default=0)  # with no answer at all, every leaf is a winner (0 votes)
    winners = [leaf for leaf in leaves if votes[tree.answer_group[leaf]] == top]  # ties: PRM decides

    def path_score(leaf: int) -> float:  # the weakest step's PRM score; an unscored path ranks last
        return -math.inf if math.isnan(tree.path_min[leaf]) else tree.path_min[leaf]

    return Choice(max(winners, key=path_score), tuple(leaves))


register_strategy("early_stop_vote", EarlyStopVoteConfig, early_stop_vote, "best-of-N, stop on agreement")
# ---- End of the strategy.


def main() -> None:
    problems = load_split("test", 4)  # the first arithmetic test problems, with gold answers
    budget = 8
    searcher = Searcher(
        resolve_policy(None), resolve_scorer(None), "early_stop_vote", n=budget, batch=2, agree=2, seed=0
    )
    results = searcher.run([problem.question for problem in problems])
    correct = 0
    for problem, result in zip(problems, results, strict=True):
        correct += result.answer is not None and canonical_answer(result.answer) == str(problem.answer)
        votes = ", ".join(f"{vote.answer} x{vote.count}" for vote in result.votes)
        print(
            f"{problem.id}: answer {result.answer} (gold {problem.answer}), "
            f"{result.ledger.generations} of {budget} solutions sampled, votes {votes}"
        )
    assert searcher.last_ledger is not None  # the whole run's ledger
    print(f"accuracy: {correct}/{len(problems)}, total FLOPs {searcher.last_ledger.flops:.3e}")


if __name__ == "__main__":
    main()
