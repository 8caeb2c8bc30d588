"""SearchTree: the one data structure every strategy searches over, one per problem.

Nodes are int ids into columns (a struct of arrays, as in mctx): node ``i``'s data is
``tree.parent[i]``, ``tree.step_text[i]``, ... The root (``ROOT = 0``) is the empty solution; every
other node is one reasoning step appended to its parent's path. Columns are Python lists because
nodes are appended one at a time in the hot loop; ``column(name)`` returns a NumPy copy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

ROOT = 0
NO_PARENT = -1
NO_GROUP = -1
UNSCORED = float("nan")
#: A step that already stands LOOP_TIMES times among the LOOP_WINDOW steps before it ends its path
#: (:meth:`SearchTree.repeats_recent_step`).
LOOP_WINDOW = 4
LOOP_TIMES = 2

_COLUMNS = (
    "parent",
    "depth",
    "step_text",
    "token_ids",
    "logprob",
    "token_logprobs",
    "score",
    "visits",
    "value_sum",
    "terminal",
    "truncated",
    "answer",
    "answer_group",
    "finish",
    "path_min",
    "path_sum",
    "path_prod",
)


class SearchTree:
    """Columns of node data for one problem.

    Columns (all of length ``len(tree)``):
        parent: int, parent id; ``NO_PARENT`` for the root.
        depth: int, number of steps on the path (root 0).
        step_text: str, the step's text without delimiter ("" for the root).
        token_ids: tuple[int, ...], the policy's tokens for this step (for a whole solution
            generated in one call, all its tokens sit on the chain's last node).
        logprob: float, the policy's summed log-probability of ``token_ids``.
        token_logprobs: tuple[float, ...], the log-probability of each of ``token_ids``, aligned
            with them and summing to ``logprob``; empty when the policy gave none.
        score: float, the PRM's probability that this step is correct (NaN until scored).
        visits, value_sum: int and float, MCTS statistics (0 for other strategies).
        terminal: bool, the path is finished (EOS, a final answer, a cut-off or max depth).
        truncated: bool, the path was cut off (token limit, empty step, max depth) rather than
            finished by the policy.
        answer: str | None, the extracted final answer of a terminal path.
        answer_group: int, index into ``answer_groups`` of equivalent answers (-1: none).
        finish: str, "step", "eos" or "length" as reported by the policy ("" for the root).
        path_min, path_sum, path_prod: running min / sum / product of the step scores along the
            path, so that every aggregation of a path score is O(1).
    """

    __slots__ = ("question", "answer_groups", *_COLUMNS, "_children")

    def __init__(self, question: str) -> None:
        self.question = question
        self.answer_groups: list[str] = []
        self.parent: list[int] = [NO_PARENT]
        self.depth: list[int] = [0]
        self.step_text: list[str] = [""]
        self.token_ids: list[tuple[int, ...]] = [()]
        self.logprob: list[float] = [0.0]
        self.token_logprobs: list[tuple[float, ...]] = [()]
        self.score: list[float] = [UNSCORED]
        self.visits: list[int] = [0]
        self.value_sum: list[float] = [0.0]
        self.terminal: list[bool] = [False]
        self.truncated: list[bool] = [False]
        self.answer: list[str | None] = [None]
        self.answer_group: list[int] = [NO_GROUP]
        self.finish: list[str] = [""]
        self.path_min: list[float] = [math.inf]
        self.path_sum: list[float] = [0.0]
        self.path_prod: list[float] = [1.0]
        self._children: list[list[int]] = [[]]

    def __len__(self) -> int:
        return len(self.parent)

    # ----------------------------------------------------------------- building
    def add_node(
        self,
        parent: int,
        step_text: str,
        token_ids: tuple[int, ...] = (),
        logprob: float = 0.0,
        finish: str = "step",
        token_logprobs: tuple[float, ...] = (),
    ) -> int:
        """Append one step below ``parent`` and return its id (unscored, not terminal)."""
        return self.add_steps([parent], [step_text], [token_ids], [logprob], [finish], [token_logprobs])

    def add_steps(
        self,
        parents: list[int],
        step_texts: list[str],
        token_ids: list[tuple[int, ...]],
        logprobs: list[float],
        finishes: list[str],
        token_logprobs: list[tuple[float, ...]] | None = None,
    ) -> int:
        """Append one step below each of ``parents`` at once (ids ``first .. first + k - 1`` in
        order) and return ``first``: the driver's hot path, one list extend per column for a whole
        round of a problem instead of one append per column and node. A parent may be a step
        added earlier in the same call (``[p, first, first + 1]`` writes a chain below ``p``).
        ``token_logprobs`` (one tuple per step, aligned with its token ids) defaults to none."""
        k = len(parents)
        if token_logprobs is None:
            token_logprobs = [()] * k
        if not (
            k == len(step_texts) == len(token_ids) == len(logprobs) == len(finishes) == len(token_logprobs)
        ):
            raise ValueError(
                f"add_steps needs one step text, token_ids, logprob, finish and token_logprobs per "
                f"parent, got {k} parents, {len(step_texts)} texts, {len(token_ids)} token_ids, "
                f"{len(logprobs)} logprobs, {len(finishes)} finishes, {len(token_logprobs)} token_logprobs"
            )
        size = len(self.parent)
        depth = self.depth
        if k and min(parents) >= 0 and max(parents) < size:  # every parent already exists
            new_depths = [depth[p] + 1 for p in parents]
        else:  # a parent may also be a step added earlier in this call (a chain)
            new_depths = []
            for i, p in enumerate(parents):
                if not 0 <= p < size + i:
                    raise IndexError(f"parent {p} is not a node of this tree (size {size + i})")
                new_depths.append((depth[p] if p < size else new_depths[p - size]) + 1)
        first = size
        nans = [UNSCORED] * k
        falses = [False] * k
        self.parent.extend(parents)
        depth.extend(new_depths)
        self.step_text.extend(step_texts)
        self.token_ids.extend(map(tuple, token_ids))  # tuple() hands a tuple back as it is
        self.logprob.extend(map(float, logprobs))
        self.token_logprobs.extend(map(tuple, token_logprobs))
        self.score.extend(nans)
        self.visits.extend([0] * k)
        self.value_sum.extend([0.0] * k)
        self.terminal.extend(falses)
        self.truncated.extend(falses)
        self.answer.extend([None] * k)
        self.answer_group.extend([NO_GROUP] * k)
        self.finish.extend(finishes)
        self.path_min.extend(nans)
        self.path_sum.extend(nans)
        self.path_prod.extend(nans)
        children = self._children
        children.extend([] for _ in range(k))
        for node, p in enumerate(parents, first):
            children[p].append(node)
        return first

    def set_score(self, node: int, score: float) -> None:
        """Record the PRM step score of ``node`` and its running path statistics (its parent must
        be scored first, or be the root)."""
        self.set_scores([node], [score])

    def set_scores(self, nodes: Iterable[int], values: Iterable[float]) -> None:
        """Record one step score per node and each node's running path min, sum and product.
        Parents first: a node's parent must be scored before it (or be the root), which holds
        when paths are scored root-first, as the driver does."""
        for node, value in zip(nodes, values, strict=True):
            up = self.parent[node]
            self.score[node] = value
            self.path_min[node] = min(self.path_min[up], value)
            self.path_sum[node] = self.path_sum[up] + value
            self.path_prod[node] = self.path_prod[up] * value

    def mark_terminal(
        self, node: int, *, truncated: bool = False, answer: str | None = None, group: int = -1
    ) -> None:
        """Mark ``node`` as the end of a solution, with its extracted answer if any."""
        self.terminal[node] = True
        self.truncated[node] = truncated
        self.answer[node] = answer
        self.answer_group[node] = group

    def add_answer_group(self, representative: str) -> int:
        """Register a new group of equivalent answers and return its index."""
        self.answer_groups.append(representative)
        return len(self.answer_groups) - 1

    # ----------------------------------------------------------------- reading
    def children(self, node: int) -> list[int]:
        """Ids of the children of ``node``, in creation order (do not mutate)."""
        return self._children[node]

    def path(self, node: int) -> list[int]:
        """Node ids from the first step to ``node`` (the root excluded)."""
        nodes = []
        parent = self.parent
        while node > ROOT:
            nodes.append(node)
            node = parent[node]
        nodes.reverse()
        return nodes

    def path_steps(self, node: int) -> tuple[str, ...]:
        """Step texts from the first step to ``node``."""
        text = self.step_text
        return tuple(text[i] for i in self.path(node))

    def repeats_recent_step(self, node: int, window: int = LOOP_WINDOW, times: int = LOOP_TIMES) -> bool:
        """Whether ``node``'s step text (spacing aside) already stands ``times`` times among the
        ``window`` steps before it on its path: a model caught in a loop, whose path the driver
        ends. One repeat alone is not a loop (an arithmetic step may rightly recur: on the
        embedded test split, stopping at the first repeat cost beam-16 2.5 points)."""
        text = self.step_text[node].strip()
        parent = self.parent
        up, seen = parent[node], 0
        for _ in range(window):
            if up <= ROOT:
                return False
            seen += self.step_text[up].strip() == text
            if seen >= times:
                return True
            up = parent[up]
        return False

    def step_scores(self, node: int) -> np.ndarray:
        """PRM step scores along the path to ``node`` (float64)."""
        score = self.score
        return np.array([score[i] for i in self.path(node)], dtype=np.float64)

    def leaves(self) -> list[int]:
        """Ids of nodes without children (the root only when nothing was expanded)."""
        return [i for i, kids in enumerate(self._children) if not kids]

    def terminals(self) -> list[int]:
        """Ids of terminal nodes, in creation order."""
        return [i for i, done in enumerate(self.terminal) if done]

    def iter_nodes(self) -> Iterator[int]:
        """All node ids, root first."""
        return iter(range(len(self.parent)))

    def column(self, name: str) -> np.ndarray:
        """A NumPy copy of one numeric or boolean column."""
        if name not in _COLUMNS or name in _OBJECT_COLUMNS:
            raise KeyError(f"{name!r} is not a numeric column; numeric columns: {_numeric()}")
        return np.asarray(getattr(self, name))

    # ----------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; NaN and infinities are written as strings so the JSON is strict."""
        columns: dict[str, Any] = {}
        for name in _COLUMNS:
            values = getattr(self, name)
            if name == "token_ids":
                values = [list(ids) for ids in values]
            elif name == "token_logprobs":
                values = [[_encode_float(v) for v in lps] for lps in values]
            elif name in _FLOAT_COLUMNS:
                values = [_encode_float(v) for v in values]
            columns[name] = list(values)
        return {"question": self.question, "answer_groups": list(self.answer_groups), **columns}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchTree:
        """Rebuild a tree written by :meth:`to_dict`; the result compares equal to the original.
        A dict written before trees kept per-token log-probabilities loads with none."""
        tree = cls(data["question"])
        tree.answer_groups = list(data["answer_groups"])
        for name in _COLUMNS:
            values: list[Any]
            if name == "token_logprobs" and name not in data:
                values = [()] * len(data["parent"])
            else:
                values = data[name]
            if name == "token_ids":
                values = [tuple(ids) for ids in values]
            elif name == "token_logprobs":
                values = [tuple(_decode_float(v) for v in lps) for lps in values]
            elif name in _FLOAT_COLUMNS:
                values = [_decode_float(v) for v in values]
            setattr(tree, name, list(values))
        tree._children = [[] for _ in tree.parent]
        for node, parent in enumerate(tree.parent[1:], 1):
            tree._children[parent].append(node)
        return tree

    def to_json(self) -> str:
        """Strict JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> SearchTree:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def to_networkx(self, chosen: int | None = None, **attributes: Any) -> Any:
        """This tree as a ``networkx.DiGraph`` (needs networkx): one node per tree node with its
        columns, path scores and ``chosen``/``pruned`` flags, edges parent -> child; ``chosen``
        marks that node's path. See :mod:`prmsearch.tree_graph` for every attribute."""
        from prmsearch.tree_graph import to_networkx

        return to_networkx(self, chosen, **attributes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchTree):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SearchTree(nodes={len(self)}, terminals={sum(self.terminal)})"


_FLOAT_COLUMNS = frozenset(("logprob", "score", "value_sum", "path_min", "path_sum", "path_prod"))
#: Columns of strings, tuples or None, which have no NumPy copy.
_OBJECT_COLUMNS = frozenset(("step_text", "token_ids", "token_logprobs", "answer", "finish"))


def _numeric() -> str:
    return ", ".join(n for n in _COLUMNS if n not in _OBJECT_COLUMNS)


def _encode_float(value: float) -> float | str:
    """Strict-JSON encoding of a float: NaN and infinities become strings."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _decode_float(value: float | str) -> float:
    return float(value)
