"""A round's traffic with the trees: the generation requests read off them, and the children,
answers and scores that come back written into them, with each problem's ledger charged.

Every schedule makes the same writes, so a problem's tree is the same for its seed whichever
schedule ran it. The writes are the driver's hot path: they touch the tree's columns directly
and charge a round's costs at once.
"""

from __future__ import annotations

from dataclasses import replace

from prmsearch.answers import AnswerMatcher, extract_answer, extract_boxed_answer
from prmsearch.costs import ModelCost
from prmsearch.policies.base import (
    Finish,
    Generation,
    GenerationRequest,
    SamplingParams,
    StepOutput,
    generation_request,
)
from prmsearch.scorers.base import ScoreRequest, StepScores, check_scores, path_score_request
from prmsearch.search.failures import describe
from prmsearch.search.job import Job
from prmsearch.search.protocol import BoundStrategy, Expand
from prmsearch.search.results import RunStats
from prmsearch.search.score_replies import last_score, last_scores
from prmsearch.seeding import node_seeds
from prmsearch.steps import split_steps
from prmsearch.tree import LOOP_TIMES, LOOP_WINDOW, SearchTree

#: a path's new nodes ``first..last`` (consecutive ids: one step, or a whole solution's chain)
Span = tuple[int, int]
#: the new nodes of a problem's round, one span per score request: a list of spans, or a range of
#: node ids when every path got one new step (the common case, written without a tuple per node)
Spans = list[Span] | range


class AnswerGroups:
    """Puts equivalent answers of one problem in one answer group, remembering canonical forms
    (answers repeat across samples, and canonicalizing can be slow)."""

    def __init__(self, matcher: AnswerMatcher) -> None:
        self.matcher = matcher
        self._canonical_forms: dict[str, str] = {}

    def canonical(self, answer: str) -> str:
        """The matcher's canonical form of ``answer``, remembered."""
        known = self._canonical_forms.get(answer)
        if known is None:
            if len(self._canonical_forms) >= 100_000:
                self._canonical_forms.clear()
            known = self._canonical_forms[answer] = self.matcher.canonicalize(answer)
        return known

    def group(self, job: Job, answer: str) -> int:
        """The answer group of ``answer`` in ``job``'s tree, made when no earlier answer matches."""
        canonical = self.canonical(answer)
        group = job.groups.get(canonical)
        if group is None:
            for other, index in list(job.groups.items()):
                if self.matcher.same(canonical, other):
                    group = index
                    break
            else:
                group = job.tree.add_answer_group(answer)
            job.groups[canonical] = group
        return group


class TreeWriter:
    """Reads each round's requests off the trees and writes what the backends return into them.

    Args:
        sampling: the per-step sampling settings.
        solution_sampling: the same for whole-solution requests (their own token limit).
        max_depth: steps after which a path ends, truncated.
        stop_on_answer: a step with a final ``\\boxed{}`` answer ends its path.
        matcher: decides which answers are equivalent.
        policy_cost, scorer_cost: what the backends' tokens cost in FLOPs.
        reads_logprobs: the scorer reads the policy's token log-probabilities.
        stats: the run's counters (the nodes written are counted there).
        always_logprobs: ask the policy for log-probabilities on every request; otherwise only
            when the scorer or the job's strategy reads them (`BoundStrategy.needs_logprobs`).
    """

    def __init__(
        self,
        sampling: SamplingParams,
        solution_sampling: SamplingParams,
        max_depth: int,
        stop_on_answer: bool,
        matcher: AnswerMatcher,
        policy_cost: ModelCost,
        scorer_cost: ModelCost,
        reads_logprobs: bool,
        stats: RunStats,
        always_logprobs: bool = False,
    ) -> None:
        self.sampling = sampling
        self.solution_sampling = solution_sampling
        self.max_depth = max_depth
        self.stop_on_answer = stop_on_answer
        self.answers = AnswerGroups(matcher)
        self.policy_cost = policy_cost
        self.scorer_cost = scorer_cost
        self.reads_logprobs = reads_logprobs
        self.stats = stats
        self.always_logprobs = always_logprobs or reads_logprobs
        self._strategy_logprobs: dict[int, tuple[BoundStrategy, bool]] = {}

    def wants_logprobs(self, strategy: BoundStrategy) -> bool:
        """Whether requests for ``strategy``'s searches ask for log-probabilities (remembered per
        strategy: a planner's answer builds its arms' configs)."""
        if self.always_logprobs:
            return True
        known = self._strategy_logprobs.get(id(strategy))
        if known is None or known[0] is not strategy:
            known = self._strategy_logprobs[id(strategy)] = (strategy, strategy.needs_logprobs)
        return known[1]

    # ------------------------------------------------------------------ requests
    def requests(self, job: Job, expand: Expand) -> list[GenerationRequest]:
        """The policy requests of one expansion, each seeded by (problem, node, how often the
        node was expanded before)."""
        tree = job.tree
        sampling = self.solution_sampling if expand.full_solution else self.sampling
        if expand.greedy:
            sampling = replace(sampling, temperature=0.0)
        requests: list[GenerationRequest] = []
        logprobs = self.wants_logprobs(job.strategy)
        paths = job.paths  # the frontier's paths, kept from the round that made it
        expansions = job.expansions
        question, seed_state, stop_at_step = tree.question, job.seed_state, not expand.full_solution
        add = requests.append
        nodes = [node for node, _ in expand.requests]
        serials = []  # how often each node was expanded before (a node asked for twice counts on)
        for node in nodes:
            serial = expansions.get(node, 0)
            expansions[node] = serial + 1
            serials.append(serial)
        # = mix_seed(job.seed, node, serial) for each request, a round at once
        seeds = node_seeds(seed_state, nodes, serials)
        for (node, count), seed in zip(expand.requests, seeds):
            steps = paths.get(node)
            add(
                generation_request(  # = GenerationRequest(...), built without its __init__
                    question,
                    steps if steps is not None else tree.path_steps(node),
                    count,
                    sampling,
                    seed,
                    stop_at_step,
                    logprobs,
                )
            )
        return requests

    def score_request(self, tree: SearchTree, path: tuple[str, ...], node: int) -> ScoreRequest:
        """The score request of the path ending at ``node``, with the policy's token
        log-probabilities along it for a scorer that reads them."""
        if not self.reads_logprobs:
            return path_score_request(tree.question, path)
        lps = tree.token_logprobs
        return ScoreRequest(tree.question, path, tuple(lps[i] for i in tree.path(node)))

    # ------------------------------------------------------------------ generations
    def write_generations(
        self,
        batch: list[tuple[Job, Expand, list[GenerationRequest]]],
        generations: dict[int, list[Generation]],
    ) -> list[tuple[Job, Spans, list[ScoreRequest]]]:
        """Write each job's children and hand back ``(job, spans, score requests)`` for scoring;
        a job whose generation failed (its error is set) is left out."""
        written = []
        for job, expand, requests in batch:
            gens = generations.get(id(job))
            if gens is None:
                continue
            reply, spans, score_requests = self.write_children(job, expand, requests, gens)
            job.reply = reply
            written.append((job, spans, score_requests))
        return written

    def write_children(
        self, job: Job, expand: Expand, requests: list[GenerationRequest], gens: list[Generation]
    ) -> tuple[list[list[int]], Spans, list[ScoreRequest]]:
        """Add every sample as a child (or a chain of steps), charge the generations, and build
        the score request of every new path (the parent's steps plus the new ones)."""
        tree, ledger = job.tree, job.ledger
        size_before = len(tree)
        reply: list[list[int]] = []
        spans: list[Span] = []
        score_requests: list[ScoreRequest] = []
        # one step per sample: every child of the round is written into the tree at once
        parents: list[int] = []
        texts: list[str] = []
        sample_list: list[StepOutput] = []
        # the round's generation costs, charged at once: a column entry per prefill and per
        # decoded sample, summed by `ModelCost.generation_flops_columns` (no call per request)
        prefill_cached: list[int] = []
        prefill_computed: list[int] = []
        decode_tokens: list[int] = []
        decode_prompts: list[int] = []
        n = generated = computed = cached = 0
        full_solution = expand.full_solution
        for (node, _), request, gen in zip(expand.requests, requests, gens, strict=True):
            n += request.n
            samples = gen.samples
            cached_here, computed_here = gen.prompt_tokens_cached, gen.prompt_tokens_computed
            prompt = cached_here + computed_here
            prefill_cached.append(cached_here)
            prefill_computed.append(computed_here)
            recomputed = gen.prompt_tokens_recomputed
            if recomputed:  # prompt tokens prefilled again after the prompt (`Generation`)
                prefill_cached.append(prompt)
                prefill_computed.append(recomputed)
            computed += computed_here + recomputed
            cached += cached_here
            lengths = [len(sample.token_ids) for sample in samples]
            decode_tokens.extend(lengths)
            decode_prompts.extend([prompt] * len(lengths))
            own = sum(lengths)
            counted = gen.generated_tokens
            if counted is None:
                generated += own
            else:  # the backend's own count; more than the samples hold is one more run
                generated += counted
                if counted > own:
                    decode_tokens.append(counted - own)
                    decode_prompts.append(prompt)
            if full_solution:
                children = []
                for sample in samples:
                    first, last = self.add_chain(job, node, sample, request.sampling.delimiter)
                    new_steps = tuple(tree.step_text[i] for i in range(first, last + 1))
                    children.append(last)
                    spans.append((first, last))
                    score_requests.append(self.score_request(tree, request.steps + new_steps, last))
                reply.append(children)
                continue
            parents.extend([node] * len(samples))
            texts.extend([sample.text for sample in samples])
            sample_list.extend(samples)
        flops = self.policy_cost.generation_flops_columns(
            prefill_cached, prefill_computed, decode_tokens, decode_prompts
        )
        ledger.charge_generation(
            n=n, generated=generated, computed=computed, cached=cached, flops=flops, calls=len(requests)
        )
        if not parents:
            self.stats.nodes += len(tree) - size_before
            return reply, spans, score_requests
        first = tree.add_steps(
            parents,
            texts,
            [sample.token_ids for sample in sample_list],
            [sample.logprob for sample in sample_list],
            # `_value_` is the member's plain attribute; `.value` is a descriptor call per sample
            [sample.finish._value_ for sample in sample_list],
            [sample.token_logprobs for sample in sample_list],
        )
        depth, max_depth, step, stop_on_answer = tree.depth, self.max_depth, Finish.STEP, self.stop_on_answer
        question, reads_logprobs = tree.question, self.reads_logprobs
        paths: dict[int, tuple[str, ...]] = {}
        add_request = score_requests.append
        child = first
        for request, gen in zip(requests, gens):
            # one pass per child: end its path where it must, and build its score request.
            # The loop check of every child of one parent reads the same recent steps, joined once:
            # a step that is no substring of them repeats none of them (the common case), and
            # only one that is gets the exact count (`repeats_recent`)
            steps = request.steps
            recent_text = "\n".join(steps[-LOOP_WINDOW:])
            start = child
            for sample in gen.samples:
                text = sample.text
                stripped = text.strip()
                if not (  # the common case: a step that does not end its path
                    sample.finish is step
                    and depth[child] < max_depth
                    and not (stop_on_answer and ("\\boxed" in text or "\\fbox" in text))
                    and stripped
                    and (stripped not in recent_text or not repeats_recent(steps, stripped))
                ):
                    self.classify(job, child, sample.finish)
                path = paths[child] = (*steps, text)
                add_request(
                    self.score_request(tree, path, child)
                    if reads_logprobs
                    else path_score_request(question, path)
                )
                child += 1
            reply.append(list(range(start, child)))
        job.paths = paths  # the next round expands these nodes, mostly: no walk up the tree
        self.stats.nodes += len(tree) - size_before
        return reply, range(first, child), score_requests  # one new node per score request

    def add_chain(self, job: Job, node: int, sample: StepOutput, delimiter: str) -> Span:
        """Split a whole solution at the delimiter into a chain of step nodes (one tree write);
        the sample's tokens, their log-probabilities and its finish sit on the chain's last node."""
        tree = job.tree
        pieces = split_steps(sample.text, delimiter)
        inner = len(pieces) - 1
        first = len(tree)
        tree.add_steps(
            [node, *range(first, first + inner)],
            pieces,
            [*([()] * inner), sample.token_ids],
            [*([0.0] * inner), sample.logprob],
            [*([Finish.STEP.value] * inner), sample.finish.value],
            [*([()] * inner), sample.token_logprobs],
        )
        last = first + inner
        self.classify(job, last, sample.finish, whole_solution=True)
        return first, last

    def classify(self, job: Job, node: int, finish: Finish, whole_solution: bool = False) -> None:
        """Decide whether ``node`` ends its path (a finished sample, an empty or repeated step, a
        boxed answer, the depth limit), and extract and group its answer when it does."""
        tree = job.tree
        text = tree.step_text[node]
        empty = not text.strip()
        at_max = tree.depth[node] >= self.max_depth and not whole_solution
        has_box = self.stop_on_answer and ("\\boxed" in text or "\\fbox" in text)
        looped: bool | None = None  # walks up the path: read only where it decides something
        if not (whole_solution or finish is not Finish.STEP or empty or at_max or has_box):
            looped = tree.repeats_recent_step(node)
            if not looped:
                return
        answer = None
        if has_box and not whole_solution:
            # With stop_on_answer, a step holding a box ends its path, so no step above this one
            # holds one: the path's boxes are this step's, and its answer is read off it alone
            answer = extract_boxed_answer(text)
        if answer is None:
            answer = extract_answer(self.sampling.delimiter.join(tree.path_steps(node)))
        if answer is None and looped is None and not (empty or at_max or whole_solution):
            looped = tree.repeats_recent_step(node)
        truncated = finish is Finish.LENGTH or (answer is None and (empty or at_max or bool(looped)))
        group = self.answers.group(job, answer) if answer is not None else -1
        tree.mark_terminal(node, truncated=truncated, answer=answer, group=group)

    # ------------------------------------------------------------------ scores
    def write_scored(
        self, batch: list[tuple[Job, Spans, list[ScoreRequest]]], scored: dict[int, list[StepScores | None]]
    ) -> None:
        """Write the scores each job got back (a job whose scoring failed has its error set)."""
        for job, spans, requests in batch:
            results = scored.get(id(job))
            if results is not None:
                self.write_scores(job, spans, requests, results)

    def write_scores(
        self, job: Job, spans: Spans, requests: list[ScoreRequest], results: list[StepScores | None]
    ) -> None:
        """Write the scores of each path's new steps and charge the round's score requests to
        the job at once; a path the PRM could not read (result None) ends unscored."""
        if isinstance(spans, range):
            self.write_step_scores(job, spans, requests, results)
            return
        tree = job.tree
        charged: list[tuple[int, int, int]] = []
        scored: list[tuple[int, list[float]]] = []
        computed = cached = 0
        for (first, last), request, result in zip(spans, requests, results):
            if result is None:
                end_too_long(job, last)
                continue
            try:  # one new step (the common case) is checked in O(1)
                if first == last:
                    values = [last_score(request, result)]
                else:
                    values = check_scores(request, result)[first - last - 1 :]
            except Exception as exc:  # scores of the wrong shape or out of [0, 1]
                job.fail(f"scorer failed: {describe(exc)}", "malformed_reply")
                break
            computed += result.tokens_computed
            cached += result.tokens_cached
            charged.append((result.tokens_cached, result.tokens_computed, len(request.steps)))
            scored.append((first, values))
        tree.set_path_scores(scored)  # root-first: a path's parent was scored in an earlier round
        self.charge_scores(job, charged, computed, cached)

    def write_step_scores(
        self, job: Job, nodes: range, requests: list[ScoreRequest], results: list[StepScores | None]
    ) -> None:
        """`write_scores` for a round whose every path got one new step (node ``nodes[i]`` for
        request ``i``): the same writes and charges, without a span per node. A round whose
        every reply is a well-formed score array goes through by columns (`last_scores`); any
        other round node by node, so a missing or malformed reply ends or fails as it did."""
        columns = last_scores(requests, results)
        if columns is not None:
            values, computed_each, cached_each = columns
            job.tree.set_step_scores(nodes, values)
            if values:
                flops = self.scorer_cost.scoring_flops_columns(
                    cached_each, computed_each, [len(r.steps) for r in requests]
                )
                job.ledger.charge_scoring(
                    computed=sum(computed_each), cached=sum(cached_each), flops=flops, calls=len(values)
                )
            return
        written: list[int] = []
        values = []
        charged: list[tuple[int, int, int]] = []
        computed = cached = 0
        for node, request, result in zip(nodes, requests, results):
            if result is None:
                end_too_long(job, node)
                continue
            try:
                value = last_score(request, result)
            except Exception as exc:  # scores of the wrong shape or out of [0, 1]
                job.fail(f"scorer failed: {describe(exc)}", "malformed_reply")
                break
            written.append(node)
            values.append(value)
            tokens_computed, tokens_cached = result.tokens_computed, result.tokens_cached
            computed += tokens_computed
            cached += tokens_cached
            charged.append((tokens_cached, tokens_computed, len(request.steps)))
        job.tree.set_step_scores(written, values)
        self.charge_scores(job, charged, computed, cached)

    def charge_scores(
        self, job: Job, charged: list[tuple[int, int, int]], computed: int, cached: int
    ) -> None:
        """Charge a round's scored requests, ``(cached, computed, steps)`` each, to the job at once."""
        if charged:
            flops = self.scorer_cost.scoring_flops_total(charged)
            job.ledger.charge_scoring(computed=computed, cached=cached, flops=flops, calls=len(charged))


def repeats_recent(steps: tuple[str, ...], stripped: str) -> bool:
    """Whether a new step (``stripped``: its text without surrounding space) already stands
    ``LOOP_TIMES`` times among the last ``LOOP_WINDOW`` of ``steps``: the loop check of
    `SearchTree.repeats_recent_step`, on the path's texts."""
    return [text.strip() for text in steps[-LOOP_WINDOW:]].count(stripped) >= LOOP_TIMES


def end_too_long(job: Job, node: int) -> None:
    """A path the PRM cannot read: it stays unscored and ends here (truncated), keeping the
    answer it already has, and the problem goes on with its other paths."""
    job.too_long += 1
    if not job.tree.terminal[node]:
        job.tree.mark_terminal(node, truncated=True)
