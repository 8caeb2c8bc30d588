"""The driver: the one loop that runs many problems' searches at once.

Each round it asks every active problem's strategy what to expand, sends all those requests to
the policy in ONE batched call, writes the children into the trees, scores every new path in ONE
batched scorer call, charges each problem's ledger, and hands each strategy its children. A
problem whose strategy finishes leaves the batch; the others go on. A failure is contained: a
failed batched call is retried problem by problem, and only the problems that still fail stop,
each with its error recorded (`prmsearch.search.calls`).

The parts live in rooms of their own: a problem in flight (`job`), the batched calls and their
failures (`calls`, `failures`), the tree writes of a round (`tree_writes`), the two schedules
(`schedules.lockstep`, `schedules.flow`) and the result types (`results`). This module chooses
the schedule and turns finished jobs into results.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prmsearch.answers import AnswerMatcher, extract_answer
from prmsearch.costs import backend_cost
from prmsearch.policies.base import Policy, SamplingParams
from prmsearch.scorers.base import Scorer
from prmsearch.search.aggregation import Aggregation, path_score, path_scores
from prmsearch.search.calls import BackendCalls
from prmsearch.search.failures import backend_unreachable
from prmsearch.search.gc_pauses import fewer_gc_pauses
from prmsearch.search.job import Job
from prmsearch.search.protocol import BoundStrategy
from prmsearch.search.results import Candidate, RunStats, SearchResult
from prmsearch.search.schedules.flow import run_flow
from prmsearch.search.schedules.lockstep import run_lockstep
from prmsearch.search.selection import Vote, tally
from prmsearch.search.tree_writes import TreeWriter
from prmsearch.tree import ROOT

__all__ = [
    "POLICY_LOGPROBS",
    "SCHEDULES",
    "Candidate",
    "Driver",
    "RunConfig",
    "RunStats",
    "SearchResult",
    "backend_unreachable",
    "fewer_gc_pauses",
]

#: how problems move through the backends (see `RunConfig.schedule`)
SCHEDULES = ("auto", "rounds", "async")
#: When the policy is asked for log-probabilities (`RunConfig.policy_logprobs`).
POLICY_LOGPROBS = ("auto", "always")


@dataclass(frozen=True)
class RunConfig:
    """Settings shared by every problem of a run.

    Attributes:
        sampling: temperature, top-p, per-step token limit and step delimiter.
        max_depth: steps after which a path is cut off (marked terminal and truncated).
        solution_max_tokens: token limit for whole-solution requests (best-of-N family).
        stop_on_answer: a step containing a final ``\\boxed{}`` answer ends the path.
        schedule: how problems move through the backends. ``"rounds"``: in rounds, every
            problem waiting for the whole round's generation and then its scoring (lock step).
            ``"async"``: each problem advances as soon as its own steps come back; its requests
            are their own policy call when the policy takes parallel calls (the HTTP server
            backends), else they join whatever else waits whenever the policy is free, and the
            PRM scores whatever waits whenever it is free, so the two backends work at once.
            ``"auto"`` (default): async when the policy takes parallel calls, else rounds; also
            rounds when the policy and the PRM both compute on this machine's CPU (their
            ``computes_on_host_cpu``), where working at once only slows both.
        overlap: start the problems in ``overlap`` groups that take turns, so that the PRM scores
            one group's new steps while the policy generates another's (1: one group; more than
            1 implies the async schedule for batching backends).
        max_batch: most samples in one policy call and paths in one PRM call (None: a call takes
            everything waiting). Larger rounds go in pieces and the problems waiting take turns
            in each call, so a small problem never waits for a large one's whole round, and a
            cancelled problem's pieces not yet sent are never computed (a server's fairness;
            implies the async schedule). A request of more than ``max_batch // 4`` samples is cut
            in pieces with seeds of their own, so its samples differ from an unbounded run's.
        policy_logprobs: when the policy is asked for token log-probabilities. ``"auto"``
            (default): only for a strategy or scorer that reads them (MCTS with the policy prior,
            confidence voting, the confidence scorer); elsewhere the vLLM and OpenAI-compatible
            backends skip them (they cost a server about a tenth of its tokens/s) and the trees
            hold ``logprob`` NaN where the backend skipped them. ``"always"``: on every request,
            so that every tree keeps them (for exports and the tree viewer). The samples are the
            same either way.

    Each problem's search stays the same for its seed under every schedule when the backends'
    samples do not depend on batch composition (the scripted and transformers backends, vLLM
    with per-request seeds); see `Driver`.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_depth: int = 32
    solution_max_tokens: int = 2048
    stop_on_answer: bool = True
    overlap: int = 1
    schedule: str = "auto"
    max_batch: int | None = None
    policy_logprobs: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, SamplingParams):
            raise ValueError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if self.policy_logprobs not in POLICY_LOGPROBS:
            raise ValueError(f"policy_logprobs must be one of {list(POLICY_LOGPROBS)} (auto: only when the "
                             f"strategy or scorer reads them), got {self.policy_logprobs!r}")
        for name in ("max_depth", "solution_max_tokens", "overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.max_batch is not None and (
            isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int) or self.max_batch < 1
        ):
            raise ValueError(f"max_batch must be an int >= 1 or None, got {self.max_batch!r}")



class Driver:
    """Runs a strategy over many problems with batched policy and scorer calls."""

    def __init__(
        self,
        policy: Policy,
        scorer: Scorer,
        config: RunConfig | None = None,
        matcher: AnswerMatcher | None = None,
    ) -> None:
        self.policy = policy
        self.scorer = scorer
        self.config = config or RunConfig()
        self.matcher = matcher or AnswerMatcher()
        self.stats = RunStats()
        self.calls = BackendCalls(policy, scorer)
        sampling = self.config.sampling
        self.writer = TreeWriter(
            sampling=sampling,
            solution_sampling=SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_new_tokens=self.config.solution_max_tokens,
                delimiter=sampling.delimiter,
            ),
            max_depth=self.config.max_depth,
            stop_on_answer=self.config.stop_on_answer,
            matcher=self.matcher,
            policy_cost=backend_cost(policy),
            scorer_cost=backend_cost(scorer),
            reads_logprobs=bool(getattr(scorer, "reads_policy_logprobs", False)),
            stats=self.stats,
            always_logprobs=self.config.policy_logprobs == "always",
        )

    def run(
        self,
        questions: Sequence[str],
        strategy: BoundStrategy,
        seeds: Sequence[int],
        on_result: Callable[[int, SearchResult], None] | None = None,
    ) -> list[SearchResult]:
        """Search every question; results come back in input order.

        ``on_result(index, result)`` is called as each problem finishes (for streaming output).
        """
        if len(seeds) != len(questions):
            raise ValueError(f"got {len(seeds)} seeds for {len(questions)} questions")
        start = time.perf_counter()
        results: list[SearchResult | None] = [None] * len(questions)
        jobs = [Job(i, q, strategy, int(s)) for i, (q, s) in enumerate(zip(questions, seeds))]

        def finish(job: Job) -> None:
            result = self.result(job)
            results[job.index] = result
            if on_result is not None:
                on_result(job.index, result)

        with fewer_gc_pauses():
            if self.asynchronous(len(jobs)):
                self.flow(jobs, finish)
            else:
                run_lockstep(jobs, finish, self.calls, self.writer, self.stats)
        self.stats.wall_s += time.perf_counter() - start
        return [r for r in results if r is not None]

    def asynchronous(self, problems: int) -> bool:
        """Whether a run of ``problems`` problems uses the asynchronous flow (see
        `RunConfig.schedule`) rather than lock-step rounds."""
        schedule = self.config.schedule
        if schedule == "async" or self.overlap_groups(problems) > 1 or self.config.max_batch is not None:
            return True
        return schedule == "auto" and self.calls.parallel and not self.calls.share_host_cpu

    def overlap_groups(self, jobs: int) -> int:
        """How many groups take turns (1 = all at once): never more than there are problems,
        and 1 when one object is both policy and scorer (its calls must not run at once)."""
        if self.calls.shared:
            return 1
        return max(1, min(self.config.overlap, jobs))

    def flow(
        self,
        jobs: list[Job],
        finish: Callable[[Job], None],
        events: queue.SimpleQueue[tuple[Any, ...]] | None = None,
        accepting: bool = False,
    ) -> None:
        """Run ``jobs`` through the asynchronous flow (`run_flow`); with ``accepting`` it also
        takes problems joining mid-run from ``events`` until a ``("close",)`` event (a session)."""
        run_flow(jobs, finish, self.calls, self.writer, self.stats,
                 groups=self.overlap_groups(len(jobs)), events=events, accepting=accepting,
                 max_batch=self.config.max_batch)

    def result(self, job: Job) -> SearchResult:
        """The `SearchResult` of a finished (or failed) job: its chosen path, answer, votes and
        candidates under its strategy's aggregation, and its ledger with the wall time."""
        tree, strategy = job.tree, job.strategy
        job.ledger.wall_s = time.perf_counter() - job.started
        choice = job.choice
        node = choice.node if choice is not None else ROOT
        aggregation = Aggregation.parse(getattr(strategy.config, "aggregation", Aggregation.MIN))
        steps = tree.path_steps(node)
        answer = tree.answer[node]
        if answer is None and steps:
            answer = extract_answer(self.config.sampling.delimiter.join(steps))
        votes: list[Vote] = []
        candidates: tuple[Candidate, ...] = ()
        score = float("nan")
        if choice is not None:
            votes = tally(tree, choice.candidates, aggregation)
            answers, groups = tree.answer, tree.answer_group
            candidates = tuple(  # the scores read as one column: a result lists every candidate
                Candidate(c, answers[c], int(groups[c]), value)
                for c, value in zip(choice.candidates, path_scores(tree, choice.candidates, aggregation))
            )
            if node != ROOT:
                score = path_score(tree, node, aggregation)
        return SearchResult(
            question=tree.question,
            strategy=strategy.name,
            answer=answer if job.error is None else None,
            node=node,
            steps=steps,
            step_scores=tuple(tree.step_scores(node).tolist()),
            score=score,
            votes=votes,
            tree=tree,
            ledger=job.ledger,
            seed=job.seed,
            error=job.error,
            error_kind=job.error_kind,
            candidates=candidates if job.error is None else (),
            notes=too_long_notes(job.too_long),
            report=dict(choice.report) if choice is not None and job.error is None else {},
        )


def too_long_notes(count: int) -> list[str]:
    """The note of a problem whose paths outgrew the PRM's context (none when none did)."""
    if not count:
        return []
    return [
        f"{count} path(s) outgrew the PRM's context and ended there, unscored (truncated); use a "
        "PRM with a longer context, or lower max_depth / the step and solution token limits"
    ]
