"""Rows of TRL datasets from graded trees: SFT paths, DPO preference pairs, stepwise labels.

Pure functions of a :class:`~prmsearch.export.problems.ProblemTree`, its
:class:`~prmsearch.export.values.PathValues` and an :class:`~prmsearch.export.config.ExportConfig`.
Each row holds the columns a TRL trainer reads (``prompt``/``completion`` or ``messages`` for
``SFTTrainer``; ``prompt``/``chosen``/``rejected`` for ``DPOTrainer``; ``prompt``/``completions``/
``labels`` for stepwise supervision) and, beside them, where it came from (``problem_id``,
``source``) and why it was chosen (correctness, scores, margins).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from prmsearch.export.config import ExportConfig
from prmsearch.export.problems import ROOT, ProblemTree
from prmsearch.export.values import PathValues
from prmsearch.search.aggregation import ranking_key

__all__ = ["Checker", "preference_rows", "rows_of", "scorer_checker", "sft_rows", "stepwise_rows"]

#: A step checker: ``(question, steps) -> one score per step`` (a checker scorer, e.g. arith-oracle).
Checker = Callable[[str, Sequence[str]], Sequence[float]]


def scorer_checker(name: str) -> Checker:
    """A :data:`Checker` from a registered scorer that checks steps exactly (e.g. ``arith-oracle``)."""
    from prmsearch.api import resolve_scorer
    from prmsearch.scorers.base import ScoreRequest

    scorer = resolve_scorer(name)

    def check(question: str, steps: Sequence[str]) -> list[float]:
        return [float(v) for v in scorer.score([ScoreRequest(question, tuple(steps))])[0].scores]

    return check


def _path_rank(values: PathValues, node: int) -> float:
    """A finished path's score as a sort key (unscored: below every score)."""
    return ranking_key(values.path_score.get(node, math.nan))


def _number(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _prompt(tree: ProblemTree, config: ExportConfig, prefix: Sequence[str] = ()) -> Any:
    if config.style == "text":
        return tree.question + config.delimiter + "".join(step + config.delimiter for step in prefix)
    messages = [] if config.system is None else [{"role": "system", "content": config.system}]
    return [*messages, {"role": "user", "content": tree.question}]


def _completion(steps: Sequence[str], config: ExportConfig, prefix: Sequence[str] = ()) -> Any:
    if config.style == "text":
        return config.delimiter.join(steps)
    return [{"role": "assistant", "content": config.delimiter.join([*prefix, *steps])}]


def _chosen_paths(tree: ProblemTree, values: PathValues, config: ExportConfig) -> list[int]:
    """The terminal nodes whose paths become rows, best-scored first where order matters."""
    score = partial(_path_rank, values)
    if config.paths == "chosen":
        node = tree.chosen
        if node is None or node not in values.path_score:
            return []
        return [node] if config.kind == "stepwise" or values.correct.get(node, not values.correct) else []
    if config.paths == "all":
        return sorted(values.path_score, key=lambda n: (-score(n), n))
    right = sorted((n for n, ok in values.correct.items() if ok), key=lambda n: (-score(n), n))
    return right[:1] if config.paths == "best-correct" else right


def _base(tree: ProblemTree, values: PathValues) -> dict[str, Any]:
    return {
        "problem_id": tree.problem_id,
        "source": tree.source,
        "reference": values.reference,
        "reference_kind": values.reference_kind,
    }


def sft_rows(tree: ProblemTree, values: PathValues, config: ExportConfig) -> list[dict[str, Any]]:
    """One row per selected path: the question and the path's steps as the completion.

    ``chosen`` keeps the search's answer only where it is graded right (or nothing is graded).
    """
    rows, seen = [], set()
    for node in _chosen_paths(tree, values, config):
        steps = tree.steps(node)
        text = config.delimiter.join(steps)
        if config.dedup and text in seen:
            continue
        seen.add(text)
        row = _base(tree, values)
        if config.style == "messages":
            system = [] if config.system is None else [{"role": "system", "content": config.system}]
            row["messages"] = [*system, {"role": "user", "content": tree.question},
                               {"role": "assistant", "content": text}]  # fmt: skip
        else:
            row["prompt"] = _prompt(tree, config)
            row["completion"] = _completion(steps, config)
        row["correct"] = values.correct.get(node)
        row["score"] = _number(values.path_score.get(node, math.nan))
        row["steps"] = len(steps)
        rows.append(row)
    return rows


def _solution_pairs(tree: ProblemTree, values: PathValues) -> list[tuple[int, int, float]]:
    """(chosen, rejected, margin) of whole solutions: right against wrong, the best-scored of each
    paired first (so the wrong paths the PRM liked most are the ones rejected); ungraded, the
    best-scored against the worst, margin the score difference."""
    score = partial(_path_rank, values)
    if values.correct:
        right = sorted((n for n, ok in values.correct.items() if ok), key=lambda n: (-score(n), n))
        wrong = sorted((n for n, ok in values.correct.items() if not ok), key=lambda n: (-score(n), n))
        return [(good, bad, 1.0) for good, bad in zip(right, wrong, strict=False)]
    ranked = sorted((n for n in values.path_score if score(n) > -math.inf), key=lambda n: (-score(n), n))
    pairs = []
    for i in range(len(ranked) // 2):
        good, bad = ranked[i], ranked[-1 - i]
        pairs.append((good, bad, score(good) - score(bad)))
    return pairs


def _step_pairs(tree: ProblemTree, values: PathValues) -> list[tuple[int, int, float]]:
    """(chosen, rejected, margin) of sibling steps: at each branching point, the child whose
    subtree is worth most against each sibling worth less (margin: the difference in value)."""
    pairs = []
    for kids in tree.children():
        valued = [k for k in kids if not math.isnan(values.value[k])]
        if len(valued) < 2:
            continue
        valued.sort(key=lambda k: (-values.value[k], k))
        best = valued[0]
        for other in valued[1:]:
            margin = values.value[best] - values.value[other]
            if margin > 0 and tree.nodes[best].step != tree.nodes[other].step:
                pairs.append((best, other, margin))
    return pairs


def _finished_below(tree: ProblemTree, values: PathValues) -> dict[int, list[int]]:
    """For each node, the finished paths (terminal nodes) below it or at it."""
    below: dict[int, list[int]] = {}
    for end in values.path_score:
        node = end
        while node > ROOT:
            below.setdefault(node, []).append(end)
            node = tree.nodes[node].parent
    return below


def _ending(values: PathValues, ends: Sequence[int], right: bool) -> int:
    """The best-scored finished path among ``ends``, taken among the right ones (``right``) or
    the wrong ones where the tree is graded and has such a path."""
    score = partial(_path_rank, values)

    wanted = [e for e in ends if values.correct.get(e) is right] if values.correct else []
    return min(wanted or ends, key=lambda e: (-score(e), e))


def preference_rows(tree: ProblemTree, values: PathValues, config: ExportConfig) -> list[dict[str, Any]]:
    """DPO pairs of one tree, largest margin first, at most ``max_pairs`` of them."""
    candidates: list[tuple[float, int, dict[str, Any]]] = []
    if config.pairs in ("solution", "both"):
        for good, bad, margin in _solution_pairs(tree, values):
            row = _base(tree, values)
            row["prompt"] = _prompt(tree, config)
            row["chosen"] = _completion(tree.steps(good), config)
            row["rejected"] = _completion(tree.steps(bad), config)
            row.update(pair="solution", margin=margin, depth=0, chosen_step=None, rejected_step=None,
                       chosen_score=_number(values.path_score.get(good, math.nan)),
                       rejected_score=_number(values.path_score.get(bad, math.nan)))  # fmt: skip
            candidates.append((margin, len(candidates), row))
    if config.pairs in ("step", "both"):
        below = _finished_below(tree, values)
        for good, bad, margin in _step_pairs(tree, values):
            parent = tree.nodes[good].parent
            prefix = tree.steps(parent) if parent != ROOT else ()
            # each side runs from its step to the end of a finished path below it (the best right
            # one for the chosen step, the best wrong one for the rejected), because a trainer ends
            # every completion with EOS: a lone step would teach the policy to stop after one step
            chosen = tree.steps(_ending(values, below[good], right=True))[len(prefix):]
            rejected = tree.steps(_ending(values, below[bad], right=False))[len(prefix):]
            row = _base(tree, values)
            row["prompt"] = _prompt(tree, config, prefix)
            row["chosen"] = _completion(chosen, config, prefix)
            row["rejected"] = _completion(rejected, config, prefix)
            row.update(pair="step", margin=margin, depth=len(prefix), chosen_step=tree.nodes[good].step,
                       rejected_step=tree.nodes[bad].step, chosen_score=_number(values.value[good]),
                       rejected_score=_number(values.value[bad]))  # fmt: skip
            candidates.append((margin, len(candidates), row))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    rows, seen = [], set()
    for margin, _, row in candidates:
        if margin < config.min_margin:
            continue
        key = repr((row["prompt"], row["chosen"], row["rejected"]))
        if row["chosen"] == row["rejected"] or (config.dedup and key in seen):
            continue
        seen.add(key)
        rows.append(row)
        if config.max_pairs and len(rows) == config.max_pairs:
            break
    return rows


def stepwise_rows(
    tree: ProblemTree, values: PathValues, config: ExportConfig, checker: Checker | None = None
) -> list[dict[str, Any]]:
    """Prompt, steps and one label per step for every selected path.

    A path is left out when one of its steps has no label of the asked kind (an unscored step,
    an ungraded tree for ``mc``, a label run without labels for ``source``).
    """
    if config.step_labels == "checker" and checker is None:
        raise ValueError("step_labels 'checker' needs a checker scorer (--checker NAME, e.g. arith-oracle)")
    rows, seen = [], set()
    for node in _chosen_paths(tree, values, config):
        path = tree.path(node)
        steps = tuple(tree.nodes[i].step for i in path)
        if config.dedup and steps in seen:
            continue
        labels: list[bool] | None
        if config.step_labels == "prm":
            scores = [tree.nodes[i].score for i in path]
            labels = None if any(math.isnan(s) for s in scores) else [s >= config.threshold for s in scores]
        elif config.step_labels == "mc":
            mc = [values.value[i] for i in path] if values.correct else []
            labels = (
                [v > config.mc_threshold for v in mc] if mc and not any(math.isnan(v) for v in mc) else None
            )
        elif config.step_labels == "source":
            given = [tree.nodes[i].label for i in path]
            labels = None if any(v is None for v in given) else [bool(v) for v in given]
        else:
            assert checker is not None
            checked = [float(s) for s in checker(tree.question, steps)]
            labels = [s >= config.threshold for s in checked] if len(checked) == len(steps) else None
        if labels is None:
            continue
        seen.add(steps)
        row = _base(tree, values)
        row["prompt"] = tree.question  # TRL's stepwise rows: the bare question; the trainer adds the steps
        row["completions"] = list(steps)
        row["labels"] = labels
        row["correct"] = values.correct.get(node)
        row["label_source"] = config.step_labels
        rows.append(row)
    return rows


def rows_of(
    tree: ProblemTree, values: PathValues, config: ExportConfig, checker: Checker | None = None
) -> list[dict[str, Any]]:
    """The rows of ``config.kind`` for one graded tree."""
    if config.kind == "sft":
        return sft_rows(tree, values, config)
    if config.kind == "preference":
        return preference_rows(tree, values, config)
    return stepwise_rows(tree, values, config, checker)
