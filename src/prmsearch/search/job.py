"""One problem in flight: its tree, its strategy's generator, its ledger and answer groups, and
the one move every schedule makes with it (`Job.advance`: resume the strategy, check what it
asked for)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from prmsearch.search.failures import describe
from prmsearch.search.ledger import Ledger
from prmsearch.search.protocol import BoundStrategy, Choice, Expand
from prmsearch.seeding import mixer_state
from prmsearch.tree import SearchTree


class Job:
    """One problem's search state while a driver runs it.

    Attributes:
        index: its position in the run (the order results come back in).
        strategy: the bound strategy searching it.
        ticket: the Future a session hands its caller (None in a plain run).
        tree, seed, ledger: its tree, seed and compute spent.
        seed_state: the seed mixer's state after ``seed`` (`prmsearch.seeding.mixer_state`).
        reply: the node ids of its last expansion's children, sent to the strategy next.
        groups: canonical answer -> answer group id.
        expansions: node -> how often it was expanded (each expansion gets its own seed).
        error: why it failed, once it did.
        error_kind: what kind of failure that was (`prmsearch.search.failures.ERROR_KINDS`).
        choice: the strategy's final choice, once it finished.
        too_long: paths longer than the PRM's context, ended as unscored leaves.
        paths: step texts of the last round's new nodes (the next round expands them, mostly).
    """

    def __init__(self, index: int, question: str, strategy: BoundStrategy, seed: int) -> None:
        self.index = index
        self.strategy = strategy
        self.ticket: Any = None
        self.tree = SearchTree(question)
        self.seed = seed
        self.seed_state = mixer_state(seed)  # node seeds mix (seed, node, serial): seed once
        self.gen = strategy.start(self.tree, np.random.default_rng(seed))
        self.reply: list[list[int]] | None = None
        self.ledger = Ledger()
        self.started = time.perf_counter()
        self.groups: dict[str, int] = {}
        self.expansions: dict[int, int] = {}
        self.error: str | None = None
        self.error_kind: str | None = None
        self.choice: Choice | None = None
        self.too_long = 0
        self.paths: dict[int, tuple[str, ...]] = {}

    @property
    def wants_scores(self) -> bool:
        """Whether its new steps are scored (a strategy that reads no scores skips the PRM: its
        steps keep NaN scores and its ledger no PRM compute)."""
        return self.strategy.needs_scores

    @property
    def cancelled(self) -> bool:
        """Whether a session's caller stopped waiting for it."""
        return self.ticket is not None and self.ticket.cancelled()

    def count_expansion(self, node: int) -> int:
        """How often ``node`` was expanded before (each expansion gets a seed of its own)."""
        serial = self.expansions.get(node, 0)
        self.expansions[node] = serial + 1
        return serial

    def path_steps(self, node: int) -> tuple[str, ...]:
        """The step texts of the path to ``node``: kept from the round that made it (the next
        round expands those nodes, mostly), else read off the tree."""
        steps = self.paths.get(node)
        return steps if steps is not None else self.tree.path_steps(node)

    def end_too_long(self, node: int) -> None:
        """A path the PRM cannot read: it stays unscored and ends here (truncated), keeping the
        answer it already has, and the problem goes on with its other paths."""
        self.too_long += 1
        if not self.tree.terminal[node]:
            self.tree.mark_terminal(node, truncated=True)

    def advance(self) -> Expand | None:
        """Resume the strategy with the last reply; its next `Expand`, or None when it finished
        (`choice` set) or failed (`error` set: a broken strategy fails its own problem only)."""
        try:
            expand = next(self.gen) if self.reply is None else self.gen.send(self.reply)
            check_expand(self.tree, expand)
            return expand
        except StopIteration as stop:
            try:
                check_choice(self.tree, stop.value)
            except Exception as exc:
                self.fail(describe(exc), "strategy")
                return None
            self.choice = stop.value
            return None
        except Exception as exc:
            self.fail(describe(exc), "strategy")
            return None

    def fail(self, error: str, kind: str) -> None:
        """Record why the search failed and what kind of failure it was."""
        self.error = error
        self.error_kind = kind


def check_choice(tree: SearchTree, choice: object) -> None:
    """Refuse a strategy's return value unless it is a `Choice` of nodes in ``tree``."""
    if not isinstance(choice, Choice):
        raise TypeError(f"strategies must return a Choice, got {type(choice).__name__}")
    size = len(tree)
    for node in (choice.node, *choice.candidates):
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= node < size:
            raise ValueError(f"strategy chose node {node!r}, not in the tree (size {size})")


def check_expand(tree: SearchTree, expand: object) -> None:
    """Refuse a strategy's request unless it expands open nodes of ``tree`` at least once each."""
    if not isinstance(expand, Expand):
        raise TypeError(f"strategies must yield Expand, got {type(expand).__name__}")
    if not expand.requests:
        raise ValueError("a strategy yielded an Expand with no requests")
    size = len(tree)
    for node, count in expand.requests:
        if not 0 <= node < size:
            raise ValueError(f"strategy asked to expand node {node}, not in the tree")
        if tree.terminal[node]:
            raise ValueError(f"strategy asked to expand terminal node {node}")
        if count < 1:
            raise ValueError(f"strategy asked for {count} children of node {node}")
