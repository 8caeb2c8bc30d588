"""One batched backend call for many problems, and what happens when it fails.

The driver sends every problem's requests to a backend in one call. When that call raises, it
retries problem by problem, so that only the problems that still fail stop, each with its error
recorded. A backend that says it cannot be reached at all (`backend_unreachable`) is not retried
problem by problem: every problem of the batch fails at once, so a sweep notices a dead server in
seconds, not after every problem's retries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prmsearch.backend_errors import MalformedReply, failure_kind
from prmsearch.backend_hooks import policy_hooks, scorer_hooks
from prmsearch.policies.base import Generation, GenerationRequest, Policy
from prmsearch.scorers.base import ContextLengthError, Scorer, ScoreRequest, StepScores
from prmsearch.search.failures import backend_unreachable, describe
from prmsearch.search.job import Job

#: recover(job, its requests, the exception) -> its results, or None when it fails
Recover = Callable[[Job, list[Any], BaseException], list[Any] | None]


def batched_call(
    per_job: Sequence[tuple[Job, list[Any]]],
    call: Callable[[list[Any]], list[Any]],
    check: Callable[[list[Any], list[Any]], None],
    what: str,
    recover: Recover | None = None,
) -> dict[int, list[Any]]:
    """Call ``call`` once on every job's requests; each job's results keyed by ``id(job)``.

    On failure the jobs are tried one call each; a job whose own call fails is handed to
    ``recover`` when given (its results, or None: the job fails), else its ``error`` is set to
    ``"<what> failed: <the exception>"`` and it gets no results.
    """
    flat = [request for _, requests in per_job for request in requests]
    if not flat:
        return {}
    out: dict[int, list[Any]] = {}

    def fail(job: Job, requests: list[Any], exc: BaseException) -> None:
        results = recover(job, requests, exc) if recover is not None else None
        if results is None:
            job.fail(f"{what} failed: {describe(exc)}", failure_kind(exc))
        else:
            out[id(job)] = results

    try:
        results = call(flat)
        check(flat, results)
    except Exception as exc:
        one_by_one(per_job, call, check, out, fail, exc)
        return out
    offset = 0
    for job, requests in per_job:
        out[id(job)] = results[offset : offset + len(requests)]
        offset += len(requests)
    return out


def one_by_one(
    per_job: Sequence[tuple[Job, list[Any]]],
    call: Callable[[list[Any]], list[Any]],
    check: Callable[[list[Any], list[Any]], None],
    out: dict[int, list[Any]],
    fail: Callable[[Job, list[Any], BaseException], None],
    failure: Exception,
) -> None:
    """After a batched call raised ``failure``: each job's requests as a call of their own, so
    only the jobs that still fail stop (``fail``); every job at once when the backend cannot be
    reached, or when there was only one."""
    if len(per_job) == 1 or backend_unreachable(failure):
        for job, requests in per_job:  # one by one cannot reach a server that is down
            fail(job, requests, failure)
        return
    for job, requests in per_job:
        try:
            results = call(requests)
            check(requests, results)
            out[id(job)] = results
        except Exception as exc:
            fail(job, requests, exc)
            if backend_unreachable(exc):
                failure = exc
                break
    for job, requests in per_job:  # the jobs a down server left untried
        if id(job) not in out and job.error is None:
            fail(job, requests, failure)


def check_generations(requests: list[GenerationRequest], gens: list[Generation]) -> None:
    """Refuse a policy reply that does not hold one generation of ``n`` samples per request."""
    if len(gens) != len(requests):
        raise MalformedReply(f"policy returned {len(gens)} generations for {len(requests)} requests")
    for request, gen in zip(requests, gens):
        if len(gen.samples) != request.n:
            raise MalformedReply(f"policy returned {len(gen.samples)} samples, asked for {request.n}")


def check_score_count(requests: list[ScoreRequest], results: list[StepScores]) -> None:
    """Refuse a scorer reply that does not hold one result per request (the values themselves
    are checked as they are written)."""
    if len(results) != len(requests):
        raise MalformedReply(f"scorer returned {len(results)} results for {len(requests)} requests")



class BackendCalls:
    """The driver's two backends as batched calls over ``(job, what, requests)`` triples, each
    job's results keyed by ``id(job)`` (see `batched_call`)."""

    def __init__(self, policy: Policy, scorer: Scorer) -> None:
        self.policy = policy
        self.scorer = scorer
        self.policy_hooks = policy_hooks(policy)  # read once: the driver and the flow ask often
        self.scorer_hooks = scorer_hooks(scorer)

    @property
    def shared(self) -> bool:
        """One object is both policy and scorer: its calls must take turns."""
        policy: object = self.policy  # as an object: mypy takes the two protocols for disjoint types
        return policy is self.scorer

    @property
    def parallel(self) -> bool:
        """Whether the policy takes concurrent calls (``parallel_calls``), so that each problem's
        requests can be their own call; never when one object is policy and scorer."""
        return self.policy_hooks.parallel_calls and not self.shared

    @property
    def share_host_cpu(self) -> bool:
        """Whether the policy and the scorer both run their model on this machine's CPU (each
        says so with a true ``computes_on_host_cpu``): working at once, they only slow each
        other down (measured in docs/performance.md, "Two real engines on two cores")."""
        return self.policy_hooks.computes_on_host_cpu and self.scorer_hooks.computes_on_host_cpu

    def generate(self, batch: Sequence[tuple[Job, object, list[Any]]]) -> dict[int, list[Any]]:
        """One batched policy call for ``(job, expand, requests)`` triples."""
        per_job = [(job, requests) for job, _, requests in batch]
        return batched_call(per_job, self.policy.generate, check_generations, "policy")

    def score(self, batch: Sequence[tuple[Job, object, list[Any]]]) -> dict[int, list[Any]]:
        """One batched scorer call for ``(job, spans, requests)`` triples."""
        per_job = [(job, requests) for job, _, requests in batch]
        return batched_call(per_job, self.scorer.score, check_score_count, "scorer", recover=self.score_each)

    def score_each(self, job: Job, requests: list[ScoreRequest], exc: BaseException) -> list[Any] | None:
        """After a job's scoring failed because a path is longer than the PRM's context, score its
        paths one by one; a too-long path gets None (it ends as an unscored leaf). None when the
        failure was something else (the job then fails with it)."""
        if not isinstance(exc, ContextLengthError):
            return None
        results: list[StepScores | None] = []
        for request in requests:
            try:
                (result,) = self.scorer.score([request])
            except ContextLengthError:
                result = None
            results.append(result)
        return results
