"""Monte Carlo tree search over reasoning steps with the PRM as the value signal.

Selection uses PUCT (Silver et al., 2017): ``Q(c) + c_puct * P(c) * sqrt(N(parent)) / (1 + N(c))``.
A selected leaf is expanded with ``expansion_width`` next steps; each child's value is its
aggregated PRM score, and with ``rollout`` (the default) the best new child is also completed
into one whole solution whose aggregated score is backed up too (``rollout=False``: PRM values
only, as in step-level MCTS that trusts the PRM's partial-path scores). Several leaves can be
selected per round (``leaves_per_round``): a virtual loss keeps them apart, so the driver can
batch them and other problems' requests into one policy call.
The budget ``n`` counts generations. The final answer follows the most visited children from the
root (``final="visits"``; when that path ends unfinished, the best-scored finished solution) or
applies ``selection`` over all finished solutions (``"value"``); ``selection`` matters only there.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from prmsearch.search.aggregation import Aggregation, parse_enum, path_score, ranking_key
from prmsearch.search.protocol import Choice, Expand, SearchGenerator, register_strategy
from prmsearch.search.selection import best_by_score, select
from prmsearch.search.strategies.common import SearchConfig, parse_bool, require_int, require_positive
from prmsearch.tree import ROOT, SearchTree


class FinalChoice(str, enum.Enum):
    """How MCTS picks its answer."""

    VISITS = "visits"
    VALUE = "value"


class Prior(str, enum.Enum):
    """Where PUCT's prior P(c) comes from."""

    UNIFORM = "uniform"
    POLICY = "policy"


@dataclass(frozen=True)
class MCTSConfig(SearchConfig):
    """MCTS.

    Attributes:
        n: budget in generations (``expansion_width`` per expanded leaf).
        expansion_width: next steps sampled when a leaf is expanded.
        c_puct: exploration constant of PUCT.
        leaves_per_round: leaves selected (with virtual loss) and expanded per round.
        value: aggregation giving a child's value (``last`` = its own step score).
        prior: ``uniform`` or ``policy`` (softmax of siblings' per-token mean logprob).
        final: ``visits`` (follow the most visited child) or ``value`` (selection over
            every finished solution).
        virtual_loss: visits added to a selected path until its expansion is backed up.
        rollout: after each expansion, also sample one whole solution from the best new child
            (one more generation) and back up its aggregated score: a simulation, as in classic
            MCTS, so that small budgets still end in finished solutions. Rollout nodes stay in
            the tree as candidate answers but are not expanded by the search.
    """

    expansion_width: int = 4
    c_puct: float = 1.0
    leaves_per_round: int = 1
    value: Aggregation = Aggregation.LAST
    prior: Prior = Prior.UNIFORM
    final: FinalChoice = FinalChoice.VISITS
    virtual_loss: int = 1
    rollout: bool = True

    @classmethod
    def budget_options(cls, budget: int) -> dict[str, Any]:
        """``n`` and ``expansion_width = clip(n // 4, 1, 4)``: room for several expansions at
        every budget, each followed by its rollout."""
        return {"n": budget, "expansion_width": max(1, min(4, budget // 4))}

    def __post_init__(self) -> None:
        super().__post_init__()
        require_int("expansion_width", self.expansion_width, 1)
        require_int("leaves_per_round", self.leaves_per_round, 1)
        require_int("virtual_loss", self.virtual_loss, 0)
        require_positive("c_puct", self.c_puct)
        object.__setattr__(self, "value", Aggregation.parse(self.value, "value"))
        object.__setattr__(self, "prior", parse_enum(Prior, self.prior, "prior"))
        object.__setattr__(self, "final", parse_enum(FinalChoice, self.final, "final"))
        object.__setattr__(self, "rollout", parse_bool("rollout", self.rollout))

    @property
    def reads_policy_logprobs(self) -> bool:
        """The policy prior is a softmax of the children's log-probabilities."""
        return self.prior is Prior.POLICY


class _Search:
    """MCTS bookkeeping kept outside the tree: priors and fully explored subtrees."""

    def __init__(self, tree: SearchTree, cfg: MCTSConfig) -> None:
        self.tree = tree
        self.cfg = cfg
        self.prior: dict[int, float] = {}
        self.exhausted: set[int] = set()
        self.rollout_nodes: set[int] = set()

    def children(self, node: int) -> list[int]:
        """The search tree's children of ``node`` (rollout chains left out)."""
        return [c for c in self.tree.children(node) if c not in self.rollout_nodes]

    def puct(self, parent: int, child: int) -> float:
        tree = self.tree
        visits = tree.visits[child]
        q = tree.value_sum[child] / visits if visits else 0.0
        explore = self.prior[child] * math.sqrt(tree.visits[parent]) / (1 + visits)
        return q + self.cfg.c_puct * explore

    def select_leaf(self, busy: set[int]) -> int | None:
        """Descend by PUCT to an unexpanded node; None when everything is explored or busy."""
        node = ROOT
        while True:
            children = self.children(node)
            kids = [c for c in children if c not in self.exhausted and c not in busy]
            if not children:
                return node
            if not kids:
                return None
            node = max(kids, key=lambda c: (self.puct(node, c), -c))

    def set_priors(self, children: list[int]) -> None:
        tree = self.tree
        if self.cfg.prior is Prior.UNIFORM or not children:
            for c in children:
                self.prior[c] = 1.0 / len(children)
            return
        logits = np.array([tree.logprob[c] / max(1, len(tree.token_ids[c])) for c in children])
        weights = np.exp(logits - logits.max())
        weights /= weights.sum()
        for c, w in zip(children, weights, strict=True):
            self.prior[c] = float(w)

    def add_visits(self, node: int, visits: int, value: float) -> None:
        """Add ``visits`` and ``value`` to ``node`` and all its ancestors."""
        tree = self.tree
        while node >= ROOT:
            tree.visits[node] += visits
            tree.value_sum[node] += value
            node = tree.parent[node]

    def mark_exhausted(self, node: int) -> None:
        """Retire a finished node, and every ancestor all of whose children are retired."""
        tree = self.tree
        while node >= ROOT:
            children = self.children(node)
            if children and any(c not in self.exhausted for c in children):
                return
            self.exhausted.add(node)
            node = tree.parent[node]

    def final_choice(self) -> tuple[int, tuple[int, ...]]:
        tree, cfg = self.tree, self.cfg
        finished = tree.terminals()
        if cfg.final is FinalChoice.VISITS:
            node = ROOT
            while self.children(node):
                node = max(
                    self.children(node),
                    key=lambda c: (tree.visits[c], tree.value_sum[c] / max(1, tree.visits[c]), -c),
                )
            if tree.terminal[node] or not finished:
                return node, tuple(finished) or (node,)
            return best_by_score(tree, finished, cfg.aggregation), tuple(finished)
        if not finished:
            leaves = [n for n in tree.leaves() if n != ROOT] or [ROOT]
            return best_by_score(tree, leaves, cfg.aggregation), tuple(leaves)
        return select(tree, finished, cfg.selection, cfg.aggregation), tuple(finished)


def mcts(tree: SearchTree, cfg: MCTSConfig, rng: np.random.Generator) -> SearchGenerator:
    """PUCT selection, expansion by ``expansion_width`` samples, PRM value backup.

    With rollouts on, every expansion keeps one generation of the budget for its rollout, and a
    last single generation (no room for a step and a rollout) is spent on a whole-solution rollout
    from the selected leaf itself, so any budget ends with finished solutions (``n=1`` samples one).
    """
    search = _Search(tree, cfg)
    spent = 0
    reserve = 1 if cfg.rollout else 0
    cost = cfg.expansion_width + reserve
    while spent < cfg.n and ROOT not in search.exhausted:
        if cfg.rollout and cfg.n - spent == 1:
            leaf = search.select_leaf(set())
            if leaf is None:
                break
            yield from _roll_out(tree, search, cfg, [leaf])
            spent += 1
            continue
        leaves: list[int] = []
        busy: set[int] = set()
        while len(leaves) < cfg.leaves_per_round and cfg.n - spent - len(leaves) * cost > reserve:
            leaf = search.select_leaf(busy)
            if leaf is None:
                break
            leaves.append(leaf)
            busy.add(leaf)
            search.add_visits(leaf, cfg.virtual_loss, 0.0)
        if not leaves:
            break
        widths = [
            min(cfg.expansion_width, cfg.n - spent - i * cost - reserve) for i in range(len(leaves))
        ]
        groups = yield Expand(tuple(zip(leaves, widths, strict=True)))
        spent += sum(widths)
        best_children = []
        for leaf, children in zip(leaves, groups, strict=True):
            search.add_visits(leaf, -cfg.virtual_loss, 0.0)
            search.set_priors(children)
            for child in children:
                value = path_score(tree, child, cfg.value)
                search.add_visits(child, 1, max(ranking_key(value), 0.0))
                if tree.terminal[child]:
                    search.mark_exhausted(child)
            live = [c for c in children if not tree.terminal[c]]
            if live:
                best_children.append(max(live, key=lambda c: (search.puct(leaf, c), -c)))
        starts = best_children[: cfg.n - spent] if cfg.rollout else []
        if starts:
            yield from _roll_out(tree, search, cfg, starts)
            spent += len(starts)
    node, candidates = search.final_choice()
    return Choice(node, candidates)


def _roll_out(
    tree: SearchTree, search: _Search, cfg: MCTSConfig, starts: list[int]
) -> Generator[Expand, list[list[int]], None]:
    """One whole-solution rollout from each start node; back up each rollout's aggregated score."""
    groups = yield Expand(tuple((c, 1) for c in starts), full_solution=True)
    for start, (end,) in zip(starts, groups, strict=True):
        node = end
        while node != start:
            search.rollout_nodes.add(node)
            node = tree.parent[node]
        value = path_score(tree, end, cfg.aggregation)
        search.add_visits(start, 1, max(ranking_key(value), 0.0))


register_strategy(
    "mcts",
    MCTSConfig,
    mcts,
    "Monte Carlo tree search: PUCT selection, PRM value backup, budget in generations",
)
