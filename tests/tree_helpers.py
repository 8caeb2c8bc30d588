"""Trees for the export and viewer tests: a real solve on the embedded models, and a large
synthetic tree (thousands of nodes) built through SearchTree's own API."""

from __future__ import annotations

import numpy as np

from prmsearch.tree import SearchTree

#: Four operations: the embedded models' trained domain, so the search has depth.
QUESTION = "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?"


def synthetic_tree(nodes: int = 3000, seed: int = 0) -> tuple[SearchTree, int]:
    """A tree of exactly ``nodes`` nodes grown breadth-first with 1-6 children per node, some
    steps left unscored (NaN), some MCTS statistics, terminals with answers and non-terminal
    leaves; returns it with a chosen node (the best-scored terminal)."""
    rng = np.random.default_rng(seed)
    tree = SearchTree("Synthetic: a large tree for the viewer. What is the result?")
    frontier = [0]
    while len(tree) < nodes:
        parent = frontier.pop(0)
        for _ in range(int(rng.integers(1, 7))):
            if len(tree) >= nodes:
                break
            depth = tree.depth[parent] + 1
            node = tree.add_node(parent, f"step {len(tree)} at depth {depth}: x = {int(rng.integers(0, 99))}",
                                 tuple(int(t) for t in rng.integers(0, 200, size=int(rng.integers(1, 8)))),
                                 float(-rng.random()))
            if rng.random() < 0.97 and not np.isnan(tree.path_sum[parent] if parent else 0.0):
                tree.set_score(node, float(rng.random()))
            if rng.random() < 0.3:
                tree.visits[node] = int(rng.integers(1, 9))
                tree.value_sum[node] = float(rng.random() * tree.visits[node])
            if depth >= 3 and rng.random() < 0.25:
                answer = str(int(rng.integers(0, 5)))
                tree.mark_terminal(node, answer=answer, group=tree.add_answer_group(answer))
            else:
                frontier.append(node)
    terminals = tree.terminals()
    scored = [t for t in terminals if not np.isnan(tree.path_min[t])]
    candidates = scored or terminals or [len(tree) - 1]
    chosen = max(candidates, key=lambda t: tree.path_min[t] if t in scored else -1.0)
    return tree, chosen
