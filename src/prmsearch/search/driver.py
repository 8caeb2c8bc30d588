"""The driver: one loop that runs many problems' searches at once, a round at a time.

A round, for every problem still searching (`Driver.round`):

1. advance the strategies: each asks for the nodes it wants expanded, or has finished;
2. build the generation requests, each seeded by (problem, node, how often it was expanded);
3. generate: one batched policy call for every problem;
4. write the children into the trees, ending the paths that finished;
5. build the score requests of the new paths;
6. score: one batched scorer call;
7. write the scores, charging each problem's ledger;
8. finish the problems that failed; the rest go on to the next round.

A failed backend call is retried problem by problem and fails only the problems that still fail
(`prmsearch.search.calls`). The asynchronous flow (`prmsearch.search.schedules.flow`) runs the same
steps per problem as its results come back instead of in rounds, so a problem's tree is the same
for its seed under either schedule.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple, TypeVar

from prmsearch.answers import AnswerMatcher, extract_answer, extract_boxed_answer
from prmsearch.costs import backend_cost
from prmsearch.policies.base import Finish, Generation, GenerationRequest, Policy, StepOutput
from prmsearch.scorers.base import Scorer, ScoreRequest, StepScores, check_scores
from prmsearch.search.aggregation import path_score, path_scores
from prmsearch.search.calls import BackendCalls
from prmsearch.search.config import POLICY_LOGPROBS, SCHEDULES, RunConfig
from prmsearch.search.events import Event
from prmsearch.search.failures import backend_unreachable, describe
from prmsearch.search.job import Job
from prmsearch.search.protocol import BoundStrategy, Expand
from prmsearch.search.results import Candidate, RunStats, SearchResult
from prmsearch.search.schedules.flow import run_flow
from prmsearch.search.selection import Vote, tally
from prmsearch.seeding import node_seeds
from prmsearch.steps import split_steps
from prmsearch.tree import ROOT

__all__ = [
    "POLICY_LOGPROBS",
    "SCHEDULES",
    "Candidate",
    "Driver",
    "NewPath",
    "RunConfig",
    "RunStats",
    "SearchResult",
    "backend_unreachable",
]

T = TypeVar("T")
R = TypeVar("R")


class NewPath(NamedTuple):
    """A path a round added: its new nodes ``first..last`` (one step, or a whole solution's
    chain) and the step texts of the whole path, for its score request."""

    first: int
    last: int
    steps: tuple[str, ...]


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
        self.answers = AnswerGroups(self.matcher)
        self.policy_cost = backend_cost(policy)
        self.scorer_cost = backend_cost(scorer)
        sampling = self.config.sampling
        self.solution_sampling = replace(sampling, max_new_tokens=self.config.solution_max_tokens)
        self.scorer_reads_logprobs = self.calls.scorer_hooks.reads_policy_logprobs
        self.always_logprobs = self.config.policy_logprobs == "always" or self.scorer_reads_logprobs

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

        if self.asynchronous(len(jobs)):
            self.flow(jobs, finish)
        else:
            active = jobs
            while active:
                active = self.round(active, finish)
        self.stats.wall_s += time.perf_counter() - start
        return [r for r in results if r is not None]

    def round(self, jobs: list[Job], finish: Callable[[Job], None]) -> list[Job]:
        """One lock-step round over ``jobs``: the jobs still searching after it."""
        self.stats.rounds += 1
        # 1. advance the strategies: each asks for an expansion, or has finished
        expanding: list[tuple[Job, Expand]] = []
        for job in jobs:
            expand = job.advance()
            if expand is None:
                finish(job)
            else:
                expanding.append((job, expand))
        if not expanding:
            return []
        # 2. build the generation requests
        batch = [(job, expand, self.generation_requests(job, expand)) for job, expand in expanding]
        # 3. generate: one policy call for every problem (a problem whose call failed gets none)
        generations = self.timed("policy", self.calls.generate, batch)
        # 4. write the children
        written = [(job, self.write_children(job, expand, requests, generations[id(job)]))
                   for job, expand, requests in batch if id(job) in generations]
        # 5. build the score requests (a strategy that reads no scores skips 5 to 7)
        to_score = [(job, paths, self.score_requests(job, paths))
                    for job, paths in written if job.wants_scores]
        # 6. score: one scorer call for every problem
        scores = self.timed("scorer", self.calls.score, to_score) if to_score else {}
        # 7. write the scores
        for job, paths, requests in to_score:
            if id(job) in scores:
                self.write_scores(job, paths, requests, scores[id(job)])
        # 8. finish the problems that failed; a strategy that is done says so at step 1
        going_on = []
        for job, _ in expanding:
            if job.error is None:
                going_on.append(job)
            else:
                finish(job)
        return going_on

    def generation_requests(self, job: Job, expand: Expand) -> list[GenerationRequest]:
        """One policy request per expanded node, seeded by (problem, node, how often the node
        was expanded before), so a problem's samples never depend on the others in its batch."""
        sampling = self.solution_sampling if expand.full_solution else self.config.sampling
        if expand.greedy:
            sampling = replace(sampling, temperature=0.0)
        logprobs = self.always_logprobs or job.strategy.needs_logprobs
        nodes = [node for node, _ in expand.requests]
        seeds = node_seeds(job.seed_state, nodes, [job.count_expansion(node) for node in nodes])
        return [
            GenerationRequest(job.tree.question, job.path_steps(node), count, sampling, seed,
                              stop_at_step=not expand.full_solution, logprobs=logprobs)
            for (node, count), seed in zip(expand.requests, seeds)
        ]

    def write_children(
        self, job: Job, expand: Expand, requests: list[GenerationRequest], generations: list[Generation]
    ) -> list[NewPath]:
        """Add every sample as a child of its node (or as a chain of steps, for a whole
        solution), end the paths that finished, and charge the generations; the new paths."""
        tree = job.tree
        size_before = len(tree)
        self.charge_generations(job, requests, generations)
        if expand.full_solution:
            new_paths = []
            job.reply = []
            for (node, _), request, generation in zip(expand.requests, requests, generations, strict=True):
                delimiter = request.sampling.delimiter
                chains = [self.add_chain(job, node, sample, delimiter) for sample in generation.samples]
                new_paths += [NewPath(first, last, request.steps + tuple(tree.step_text[first : last + 1]))
                              for first, last in chains]
                job.reply.append([last for _, last in chains])
        else:  # one step per sample: the round's children of this problem are written at once
            parents: list[int] = []
            before: list[tuple[str, ...]] = []
            samples: list[StepOutput] = []
            for (node, _), request, generation in zip(expand.requests, requests, generations, strict=True):
                parents += [node] * len(generation.samples)
                before += [request.steps] * len(generation.samples)
                samples += generation.samples
            first = tree.add_steps(parents, [s.text for s in samples], [s.token_ids for s in samples],
                                   [s.logprob for s in samples], [s.finish.value for s in samples],
                                   [s.token_logprobs for s in samples])
            children = range(first, first + len(samples))
            new_paths = [NewPath(child, child, (*steps, sample.text))
                         for child, steps, sample in zip(children, before, samples)]
            for path, sample in zip(new_paths, samples):
                self.end_path(job, path.last, sample.finish)
            job.reply = []
            for generation in generations:  # each request's children, in order
                job.reply.append(list(range(first, first + len(generation.samples))))
                first += len(generation.samples)
        job.paths = {path.last: path.steps for path in new_paths}  # next round's requests read them
        self.stats.nodes += len(tree) - size_before
        return new_paths

    def add_chain(self, job: Job, node: int, sample: StepOutput, delimiter: str) -> tuple[int, int]:
        """A whole solution split at the delimiter into a chain of steps below ``node``; the
        sample's tokens, log-probabilities and finish sit on the chain's last node."""
        pieces = split_steps(sample.text, delimiter)
        inner = len(pieces) - 1
        first = len(job.tree)
        job.tree.add_steps(
            [node, *range(first, first + inner)],
            pieces,
            [*([()] * inner), sample.token_ids],
            [*([0.0] * inner), sample.logprob],
            [*([Finish.STEP.value] * inner), sample.finish.value],
            [*([()] * inner), sample.token_logprobs],
        )
        self.end_path(job, first + inner, sample.finish, whole_solution=True)
        return first, first + inner

    def end_path(self, job: Job, node: int, finish: Finish, whole_solution: bool = False) -> None:
        """Mark ``node`` terminal when its path ends there, with its answer grouped: a whole
        solution, a sample that stopped on its own (EOS or its token limit), an empty step, a
        boxed answer, a step the path keeps repeating (a loop), or the depth limit."""
        tree = job.tree
        text = tree.step_text[node]
        empty = not text.strip()
        at_max = tree.depth[node] >= self.config.max_depth and not whole_solution
        has_box = self.config.stop_on_answer and ("\\boxed" in text or "\\fbox" in text)
        looped = not (empty or at_max or whole_solution) and tree.repeats_recent_step(node)
        if not (whole_solution or finish is not Finish.STEP or empty or at_max or has_box or looped):
            return
        answer = None
        if has_box and not whole_solution:
            # a step holding a box ends its path, so no step above it holds one: read it alone
            answer = extract_boxed_answer(text)
        if answer is None:
            answer = extract_answer(self.config.sampling.delimiter.join(tree.path_steps(node)))
        truncated = finish is Finish.LENGTH or (answer is None and (empty or at_max or looped))
        group = self.answers.group(job, answer) if answer is not None else -1
        tree.mark_terminal(node, truncated=truncated, answer=answer, group=group)

    def score_requests(self, job: Job, paths: list[NewPath]) -> list[ScoreRequest]:
        """The score request of every new path, with the policy's token log-probabilities along
        it for a scorer that reads them."""
        tree = job.tree
        if not self.scorer_reads_logprobs:
            return [ScoreRequest(tree.question, path.steps) for path in paths]
        logprobs = tree.token_logprobs
        return [ScoreRequest(tree.question, path.steps, tuple(logprobs[i] for i in tree.path(path.last)))
                for path in paths]

    def write_scores(
        self, job: Job, paths: list[NewPath], requests: list[ScoreRequest], results: list[StepScores | None]
    ) -> None:
        """Write each new path's step scores and charge them; a path the PRM could not read
        (None) ends there unscored, and a malformed reply fails the problem."""
        nodes: list[int] = []
        values: list[float] = []
        charged: list[tuple[int, int, int]] = []
        for path, request, result in zip(paths, requests, results):
            if result is None:
                job.end_too_long(path.last)
                continue
            try:
                values += check_scores(request, result, new=path.last - path.first + 1)
            except Exception as exc:  # scores of the wrong shape or out of [0, 1]
                job.fail(f"scorer failed: {describe(exc)}", "malformed_reply")
                break
            nodes += range(path.first, path.last + 1)
            charged.append((result.tokens_cached, result.tokens_computed, len(request.steps)))
        job.tree.set_scores(nodes, values)  # root-first: a path's parent was scored before it
        if charged:
            job.ledger.charge_scoring(computed=sum(c[1] for c in charged), cached=sum(c[0] for c in charged),
                                      flops=self.scorer_cost.scoring_flops_total(charged), calls=len(charged))

    def charge_generations(
        self, job: Job, requests: list[GenerationRequest], generations: list[Generation]
    ) -> None:
        """Charge a round's generations to the job: samples, tokens and FLOPs (every prefill and
        every decoded sample, at its prompt's length)."""
        prefill_cached: list[int] = []
        prefill_computed: list[int] = []
        decoded: list[int] = []
        decoded_after: list[int] = []
        n = generated = 0
        for request, generation in zip(requests, generations):
            n += request.n
            prompt = generation.prompt_tokens_cached + generation.prompt_tokens_computed
            prefill_cached.append(generation.prompt_tokens_cached)
            prefill_computed.append(generation.prompt_tokens_computed)
            if generation.prompt_tokens_recomputed:  # prefilled again after the prompt
                prefill_cached.append(prompt)
                prefill_computed.append(generation.prompt_tokens_recomputed)
            lengths = [len(sample.token_ids) for sample in generation.samples]
            counted = generation.generated_tokens
            if counted is not None and counted > sum(lengths):  # the backend ran more than it kept
                lengths.append(counted - sum(lengths))
            decoded += lengths
            decoded_after += [prompt] * len(lengths)
            generated += sum(lengths) if counted is None else counted
        cost = self.policy_cost.generation_flops_columns
        job.ledger.charge_generation(
            n=n, generated=generated, computed=sum(prefill_computed), calls=len(requests),
            cached=sum(g.prompt_tokens_cached for g in generations),
            flops=cost(prefill_cached, prefill_computed, decoded, decoded_after),
        )

    def timed(self, backend: str, call: Callable[[T], R], batch: T) -> R:
        """One backend call, counted in the run's stats (``backend``: "policy" or "scorer")."""
        started = time.perf_counter()
        out = call(batch)
        elapsed = time.perf_counter() - started
        self.stats.count_call(backend, elapsed)
        return out

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

    def flow(self, jobs: list[Job], finish: Callable[[Job], None],
             events: queue.SimpleQueue[Event] | None = None, accepting: bool = False) -> None:
        """Run ``jobs`` through the asynchronous flow (`run_flow`); with ``accepting`` it also
        takes problems joining mid-run from ``events`` until a close event (a session)."""
        run_flow(jobs, finish, self, groups=self.overlap_groups(len(jobs)), events=events,
                 accepting=accepting, max_batch=self.config.max_batch)

    def result(self, job: Job) -> SearchResult:
        """The `SearchResult` of a finished (or failed) job: its chosen path, answer, votes and
        candidates under its strategy's aggregation, and its ledger with the wall time."""
        tree, strategy, choice = job.tree, job.strategy, job.choice
        job.ledger.wall_s = time.perf_counter() - job.started
        node = choice.node if choice is not None else ROOT
        aggregation = strategy.config.path_aggregation
        steps = tree.path_steps(node)
        answer = tree.answer[node]
        if answer is None and steps:
            answer = extract_answer(self.config.sampling.delimiter.join(steps))
        failed = job.error is not None
        votes: list[Vote] = []
        candidates: tuple[Candidate, ...] = ()
        if choice is not None:
            votes = tally(tree, choice.candidates, aggregation)
            candidates = tuple(
                Candidate(c, tree.answer[c], int(tree.answer_group[c]), value)
                for c, value in zip(choice.candidates, path_scores(tree, choice.candidates, aggregation))
            )
        return SearchResult(
            question=tree.question,
            strategy=strategy.name,
            answer=None if failed else answer,
            node=node,
            steps=steps,
            step_scores=tuple(tree.step_scores(node).tolist()),
            score=float("nan") if choice is None or node == ROOT else path_score(tree, node, aggregation),
            votes=votes,
            tree=tree,
            ledger=job.ledger,
            seed=job.seed,
            error=job.error,
            error_kind=job.error_kind,
            candidates=() if failed else candidates,
            notes=too_long_notes(job.too_long),
            report=dict(choice.report) if choice is not None and not failed else {},
        )


class AnswerGroups:
    """Puts equivalent answers of one problem in one answer group, remembering canonical forms
    (answers repeat across samples, and canonicalizing can be slow)."""

    def __init__(self, matcher: AnswerMatcher) -> None:
        self.matcher = matcher
        self.canonical_forms: dict[str, str] = {}

    def group(self, job: Job, answer: str) -> int:
        """The answer group of ``answer`` in ``job``'s tree, made when no earlier answer matches."""
        canonical = self.canonical_forms.get(answer)
        if canonical is None:
            if len(self.canonical_forms) >= 100_000:
                self.canonical_forms.clear()
            canonical = self.canonical_forms[answer] = self.matcher.canonicalize(answer)
        group = job.groups.get(canonical)
        if group is None:
            same = (index for other, index in job.groups.items() if self.matcher.same(canonical, other))
            group = next(same, None)
            if group is None:
                group = job.tree.add_answer_group(answer)
            job.groups[canonical] = group
        return group


def too_long_notes(count: int) -> list[str]:
    """The note of a problem whose paths outgrew the PRM's context (none when none did)."""
    if not count:
        return []
    return [
        f"{count} path(s) outgrew the PRM's context and ended there, unscored (truncated); use a "
        "PRM with a longer context, or lower max_depth / the step and solution token limits"
    ]
