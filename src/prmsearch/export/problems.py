"""One problem's searched solutions, as the exporters read them, from a tree file or a label run.

A :class:`ProblemTree` is the part of a search tree that training data needs: each node's step
text, PRM score, whether its path ended and with which answer, and (from a ``label`` run) the
step labels and Monte Carlo values the labeller wrote. Search trees come from node-link data
(:mod:`prmsearch.tree_graph`); a label run's solutions of one problem become chains under one
root, since their samples share no steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from prmsearch.search.aggregation import Aggregation
from prmsearch.tree_graph import FORMAT

__all__ = ["ExportNode", "ProblemTree", "TreeFormatError", "problem_from_graph", "problem_from_label_rows"]

ROOT = 0
_AGGREGATIONS = tuple(a.value for a in Aggregation)


class TreeFormatError(ValueError):
    """A tree or label file that cannot be exported; the message names the file and the fix."""


@dataclass(frozen=True, slots=True)
class ExportNode:
    """One step of a searched solution.

    Attributes:
        parent: the parent's index (-1 for the root).
        step: the step's text ("" for the root).
        score: the PRM's step score (NaN: not scored).
        path_scores: the path's score under each aggregation (``min``, ``mean``, ``prod``,
            ``last``); NaN where a step on the path is unscored.
        terminal: the path ends here; ``answer`` is its extracted final answer (None: none).
        label: a step label the source carries (a label run's ``labels``); None where absent.
        mc_value: the Monte Carlo value a label run estimated for the step; None where absent.
    """

    parent: int
    step: str
    score: float = math.nan
    path_scores: Mapping[str, float] = field(default_factory=dict)
    terminal: bool = False
    answer: str | None = None
    label: bool | None = None
    mc_value: float | None = None


@dataclass(frozen=True)
class ProblemTree:
    """The searched solutions of one problem, with where they came from.

    Attributes:
        source: the file it was read from (named in every message about it).
        problem_id: the benchmark's id of the problem.
        question: the question text.
        gold: the gold answer, None when the source has none (then a vote may stand in).
        nodes: the steps; ``nodes[0]`` is the root, every parent comes before its children.
        chosen: the node the search returned (None: not recorded).
        meta: what made it: strategy, budget, seed, policy, PRM, label method.
        answer_keys: per terminal node, the key of its answer group (equivalent answers share one).
    """

    source: str
    problem_id: str
    question: str
    gold: str | None
    nodes: tuple[ExportNode, ...]
    chosen: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    answer_keys: Mapping[int, int] = field(default_factory=dict)

    def children(self) -> list[list[int]]:
        """Each node's children, in node order."""
        kids: list[list[int]] = [[] for _ in self.nodes]
        for index, node in enumerate(self.nodes[1:], start=1):
            kids[node.parent].append(index)
        return kids

    def path(self, node: int) -> list[int]:
        """The nodes from the first step down to ``node`` (the root left out)."""
        out = []
        while node > ROOT:
            out.append(node)
            node = self.nodes[node].parent
        return out[::-1]

    def steps(self, node: int) -> tuple[str, ...]:
        """The step texts from the first step down to ``node``."""
        return tuple(self.nodes[i].step for i in self.path(node))

    def terminals(self) -> list[int]:
        """The nodes where a path ended, in node order."""
        return [i for i, node in enumerate(self.nodes) if node.terminal and i != ROOT]


def _float(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def problem_from_graph(graph: Mapping[str, Any], source: str) -> ProblemTree:
    """A :class:`ProblemTree` from a tree's node-link data (as :func:`read_tree_graph` returns it).

    Raises :class:`TreeFormatError` naming ``source`` when the data is not a prmsearch tree or its
    nodes do not form one (a node before its parent, a missing root).
    """
    attrs = graph.get("graph") if isinstance(graph, Mapping) else None
    if not isinstance(attrs, Mapping) or attrs.get("format") != FORMAT:
        raise TreeFormatError(f"{source}: not a prmsearch tree (no 'format': {FORMAT!r} in its graph data)")
    question = attrs.get("question")
    if not isinstance(question, str) or not question.strip():
        raise TreeFormatError(f"{source}: the tree has no question")
    raw_nodes = sorted(graph.get("nodes") or [], key=lambda n: n.get("id", -1))
    if not raw_nodes or raw_nodes[0].get("id") != ROOT or raw_nodes[0].get("parent", -1) != -1:
        raise TreeFormatError(f"{source}: the tree has no root node 0")
    nodes: list[ExportNode] = []
    groups: dict[int, int] = {}
    for position, raw in enumerate(raw_nodes):
        if raw.get("id") != position:
            raise TreeFormatError(f"{source}: node ids must run 0..{len(raw_nodes) - 1}, missing {position}")
        parent = int(raw.get("parent", -1))
        if position and not 0 <= parent < position:
            raise TreeFormatError(f"{source}: node {position} has parent {parent}, not an earlier node")
        answer = raw.get("answer")
        terminal = bool(raw.get("terminal")) and position != ROOT
        if terminal and isinstance(answer, str) and answer and int(raw.get("answer_group", -1)) >= 0:
            groups[position] = int(raw["answer_group"])
        nodes.append(
            ExportNode(
                parent=parent,
                step=str(raw.get("step_text") or ""),
                score=_float(raw.get("score")),
                path_scores={name: _float(raw.get(f"path_{name}")) for name in _AGGREGATIONS},
                terminal=terminal,
                answer=answer if isinstance(answer, str) and answer else None,
            )
        )
    gold = attrs.get("gold")
    meta = {key: attrs[key] for key in ("strategy", "budget", "seed") if attrs.get(key) is not None}
    meta["answer"] = attrs.get("answer")
    chosen = attrs.get("chosen")
    return ProblemTree(
        source=source,
        problem_id=str(attrs.get("qid") or source),
        question=question,
        gold=str(gold) if gold not in (None, "") else None,
        nodes=tuple(nodes),
        chosen=int(chosen) if isinstance(chosen, int) and 0 <= chosen < len(nodes) else None,
        meta=meta,
        answer_keys=groups,
    )


def problem_from_label_rows(rows: Sequence[Mapping[str, Any]], source: str) -> ProblemTree:
    """The labelled solutions of one problem (rows of a label run's ``labels.jsonl`` that share a
    ``problem_id``) as chains under one root, carrying the labels, MC values and correctness.

    Raises :class:`TreeFormatError` when the rows lack their question (a stripped label folder:
    restore it first) or their steps.
    """
    first = rows[0]
    problem_id = str(first.get("problem_id"))
    question = first.get("prompt")
    if not isinstance(question, str) or not question.strip():
        raise TreeFormatError(
            f"{source}: problem {problem_id} has no question ('prompt' is empty: a stripped label "
            "folder); put the questions back with `python scripts/label_questions.py restore STRIPPED "
            "OUT --dataset NAME --split SPLIT`, then export OUT"
        )
    nodes: list[ExportNode] = [ExportNode(parent=-1, step="")]
    groups: dict[int, int] = {}
    answers: dict[str, int] = {}
    for row in rows:
        steps = row.get("completions")
        if row.get("status") not in (None, "labelled") or not isinstance(steps, list) or not steps:
            continue  # a failed or pending row: nothing to learn from
        labels = cast("list[Any]", row.get("labels")) if isinstance(row.get("labels"), list) else []
        values = cast("list[Any]", row.get("mc_values")) if isinstance(row.get("mc_values"), list) else []
        parent = ROOT
        for k, step in enumerate(steps):
            last = k == len(steps) - 1
            answer = row.get("answer") if last and isinstance(row.get("answer"), str) else None
            nodes.append(
                ExportNode(
                    parent=parent,
                    step=str(step),
                    terminal=last,
                    answer=answer or None,
                    label=bool(labels[k]) if k < len(labels) and labels[k] is not None else None,
                    mc_value=_float(values[k]) if k < len(values) and values[k] is not None else None,
                )
            )
            parent = len(nodes) - 1
        if answer:
            groups[parent] = answers.setdefault(answer.strip(), len(answers))
    gold = first.get("gold")
    provenance = (
        cast("Mapping[str, Any]", first.get("provenance"))
        if isinstance(first.get("provenance"), Mapping)
        else {}
    )
    meta = {"method": first.get("method"), **{k: provenance.get(k) for k in ("policy", "judge", "dataset")}}
    return ProblemTree(
        source=source,
        problem_id=problem_id,
        question=question,
        gold=str(gold) if gold not in (None, "") else None,
        nodes=tuple(nodes),
        meta={k: v for k, v in meta.items() if v is not None},
        answer_keys=groups,
    )
