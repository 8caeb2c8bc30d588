"""Step labels for training the arithmetic PRM, from three sources.

Following "The Lessons of Developing Process Reward Models in Mathematical Reasoning"
(Zhang et al., 2025), the same policy samples are labelled three ways:

* ``checker``: the exact checker (the analogue of human annotation): steps before the first
  error are correct (1), the first wrong step and everything after it are wrong (0);
* ``mc``: Monte Carlo estimation (Math-Shepherd): ``k`` policy rollouts from each step prefix;
  the soft label is the fraction that reaches the gold answer, the hard label is "any did";
* ``consensus``: the checker's labels, kept only on the steps where the MC hard label agrees.

Sampling and rollouts run through the engine's own tree and batched driver
(:mod:`prmsearch.prm.labelling`, which labels any policy and dataset): one search per problem
samples the solutions, then expands every distinct step prefix with ``k`` whole-solution
rollouts, so shared prefixes are rolled out once. This module adds what only the arithmetic
domain has: the exact checker and corrupted gold solutions.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prmsearch.api import Searcher
from prmsearch.arith.checker import check_solution
from prmsearch.arith.problems import ArithProblem, apply_op
from prmsearch.policies.base import Policy, SamplingParams
from prmsearch.prm.labelling import ROLLOUTS, RolloutConfig, chain_end, mc_values
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import BoundStrategy
from prmsearch.tree import ROOT

__all__ = ["ROLLOUTS", "LabelSource", "LabelledSolution", "RolloutConfig", "checker_labels", "corrupted_gold",
           "label_solutions"]


class LabelSource(str, enum.Enum):
    """Where step labels come from."""

    CHECKER = "checker"
    MC = "mc"
    MC_SOFT = "mc-soft"
    CONSENSUS = "consensus"


@dataclass(frozen=True)
class LabelledSolution:
    """One policy solution with its step labels from every source.

    Attributes:
        checker: 1.0 before the first error, 0.0 from it on.
        mc_soft: fraction of rollouts from each step prefix that reach the gold answer (for the
            last step: whether its own answer is right); empty when no rollouts were made.
    """

    problem_id: str
    question: str
    steps: tuple[str, ...]
    first_error: int
    answer_correct: bool
    checker: tuple[float, ...]
    mc_soft: tuple[float, ...]

    def labels(self, source: LabelSource | str) -> list[float | None]:
        """Per-step training targets for ``source``; None masks a step out."""
        source = LabelSource(source)
        if source is LabelSource.CHECKER:
            return list(self.checker)
        if not self.mc_soft:
            raise ValueError(f"solution {self.problem_id} has no MC labels; sample with rollouts > 0")
        hard = [1.0 if v > 0 else 0.0 for v in self.mc_soft]
        if source is LabelSource.MC:
            return hard
        if source is LabelSource.MC_SOFT:
            return list(self.mc_soft)
        return [c if c == h else None for c, h in zip(self.checker, hard, strict=True)]


def checker_labels(problem: ArithProblem, steps: Sequence[str]) -> tuple[int, bool, tuple[float, ...]]:
    """First error index, answer correctness and 1/0 labels by the exact checker."""
    check = check_solution(problem, steps)
    first = check.first_error
    if first == -1 and not check.answer_correct:
        first = len(steps) - 1  # no step is wrong, but no right answer either: blame the last
    labels = tuple(1.0 if first == -1 or i < first else 0.0 for i in range(len(steps)))
    return first, check.answer_correct, labels


def label_solutions(
    policy: Policy,
    problems: Sequence[ArithProblem],
    cfg: RolloutConfig,
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 160,
    seed: int = 0,
    chunk: int = 64,
) -> list[LabelledSolution]:
    """Sample ``cfg.samples`` solutions per problem and label every step from every source."""
    searcher = Searcher(
        policy,
        ScriptedScorer({}, default=0.5, num_parameters=0),
        BoundStrategy(ROLLOUTS, cfg),
        sampling=SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
        solution_max_tokens=max_new_tokens,
        seed=seed,
    )
    out: list[LabelledSolution] = []
    for start in range(0, len(problems), chunk):
        batch = list(problems[start : start + chunk])
        results = searcher.run([p.question for p in batch])
        for problem, result in zip(batch, results, strict=True):
            if result.error:
                raise RuntimeError(f"labelling {problem.id} failed: {result.error}")
            tree = result.tree
            gold = str(problem.answer)
            mc = mc_values(tree, lambda answer, gold=gold: answer == gold) if cfg.rollouts else {}
            for leaf in tree.children(ROOT)[: cfg.samples]:
                end = chain_end(tree, leaf)
                steps = tree.path_steps(end)
                if not steps or not all(s.strip() for s in steps):
                    continue
                first, correct, checker = checker_labels(problem, steps)
                mc_soft: tuple[float, ...] = ()
                if cfg.rollouts:
                    own = 1.0 if tree.answer[end] == gold else 0.0
                    mc_soft = (*tuple(mc.get(steps[: i + 1], own) for i in range(len(steps) - 1)), own)
                out.append(
                    LabelledSolution(problem.id, problem.question, steps, first, correct, checker, mc_soft)
                )
    return out


def corrupted_gold(
    problems: Sequence[ArithProblem],
    rng: np.random.Generator,
    clean_fraction: float = 0.3,
    step_error_rate: float | None = None,
    results_only: bool = True,
    kind_weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
) -> list[LabelledSolution]:
    """Gold solutions, most with one realistic error, labelled by the checker.

    The error is a wrong result (off by 1-10), a wrong operand or a wrong operation at a random
    step; later steps carry on correctly from the wrong value, as a policy would, so only the
    first error separates them from a right solution. With ``step_error_rate``, every step
    instead gets an error with that probability, independently (several errors per solution:
    more examples for the local targets of `prm_dense`): a wrong result only, or with
    ``results_only=False`` one of the three kinds drawn with ``kind_weights`` (result, operand,
    operation).
    ``mc_soft`` is left empty: these solutions were not sampled from the policy, so they have
    no Monte Carlo labels.
    """
    out = []
    for problem in problems:
        steps = list(problem.gold_steps)
        if step_error_rate is not None:
            wrong = {i for i in range(len(problem.ops)) if rng.random() < step_error_rate}
            steps = _corrupt(problem, wrong, rng, results_only=results_only, kind_weights=kind_weights)
        elif rng.random() >= clean_fraction:
            steps = _corrupt(problem, {int(rng.integers(len(problem.ops)))}, rng)
        first, correct, labels = checker_labels(problem, steps)
        out.append(LabelledSolution(problem.id, problem.question, tuple(steps), first, correct, labels, ()))
    return out


def _corrupt(
    problem: ArithProblem,
    indices: set[int],
    rng: np.random.Generator,
    results_only: bool = False,
    kind_weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
) -> list[str]:
    """The gold steps with an error at each step of ``indices``, propagated through the later
    steps (``results_only``: every error is a wrong result)."""
    from prmsearch.arith.problems import Op, format_step

    steps, value = [], problem.start
    last = len(problem.ops) - 1
    for i, op in enumerate(problem.ops):
        shown = op
        result = apply_op(value, op)
        if i in indices:
            kind = 0 if results_only else _kind(rng, kind_weights)
            wrong_op = None
            if kind == 1:  # a wrong operand (the result right for it)
                wrong_op = Op(op.symbol, max(1, op.operand + int(rng.choice([-2, -1, 1, 2]))))
            elif kind == 2:  # a wrong operation (the result right for it)
                wrong_op = Op(str(rng.choice([s for s in "+-*" if s != op.symbol])), op.operand)
            if wrong_op is not None and wrong_op != op and apply_op(value, wrong_op) is not None:
                shown, result = wrong_op, apply_op(value, wrong_op)
            else:
                result = (result or value) + int(rng.choice([-1, 1])) * int(rng.integers(1, 11))
        if result is None:
            result = value
        steps.append(format_step(value, shown, result, i == last))
        value = result
    return steps


def _kind(rng: np.random.Generator, weights: tuple[float, float, float]) -> int:
    """0 (wrong result), 1 (wrong operand) or 2 (wrong operation), drawn with ``weights``; equal
    weights draw exactly as ``rng.integers(3)`` did, so earlier runs stay reproducible."""
    if np.allclose(weights, 1 / 3):
        return int(rng.integers(3))
    total = float(sum(weights))
    return int(rng.choice(3, p=[w / total for w in weights]))
