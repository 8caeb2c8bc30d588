"""Built-in strategies; importing this package registers them by name."""

from prmsearch.search.strategies import (
    adaptive_vote,
    beam,
    confidence_vote,
    dvts,
    mcts,
    particle_filter,
    planner,
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
    "planner",
    "rebase",
    "sampling",
]
