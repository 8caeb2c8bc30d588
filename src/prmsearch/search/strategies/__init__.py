"""Built-in strategies; importing this package registers them by name."""

from prmsearch.search.strategies import beam, dvts, mcts, particle_filter, rebase, sampling

__all__ = ["beam", "dvts", "mcts", "particle_filter", "rebase", "sampling"]
