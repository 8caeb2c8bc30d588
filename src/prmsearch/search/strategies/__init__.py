"""Built-in strategies; importing this package registers them by name (the ``planner`` lives in
:mod:`prmsearch.planner` and registers through the ``prmsearch.plugins`` entry point)."""

from prmsearch.search.strategies import (
    adaptive_vote,
    beam,
    confidence_vote,
    dvts,
    mcts,
    particle_filter,
    rebase,
    sampling,
)

__all__ = [
    "adaptive_vote",
    "beam",
    "confidence_vote",
    "dvts",
    "mcts",
    "particle_filter",
    "rebase",
    "sampling",
]
