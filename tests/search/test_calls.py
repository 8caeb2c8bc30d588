"""`batched_call`: one call for every problem, retried problem by problem when it fails, and a
backend that cannot be reached failing the whole batch at once (each failure typed)."""

from __future__ import annotations

import numpy as np

from prmsearch.backend_errors import BackendUnreachable, ContextTooLong
from prmsearch.search.calls import batched_call
from prmsearch.search.job import Job
from prmsearch.search.protocol import make_strategy


def _jobs(count: int) -> list[Job]:
    strategy = make_strategy("beam", n=4)
    return [Job(i, f"question {i}", strategy, seed=i) for i in range(count)]


def _no_check(requests, results) -> None:
    pass


class Backend:
    """Answers each request with its own text; fails any call holding a request in ``bad``
    (with ``error``), and counts its calls."""

    def __init__(self, bad=(), error: type[Exception] = ValueError) -> None:
        self.bad, self.error, self.calls = set(bad), error, 0

    def __call__(self, requests):
        self.calls += 1
        if self.bad & set(requests):
            raise self.error("that request cannot be served")
        return [f"answer to {r}" for r in requests]


def test_one_call_serves_every_job_in_order():
    jobs, backend = _jobs(3), Backend()
    per_job = [(job, [f"r{job.index}a", f"r{job.index}b"]) for job in jobs]
    out = batched_call(per_job, backend, _no_check, "policy")
    assert backend.calls == 1
    assert out[id(jobs[1])] == ["answer to r1a", "answer to r1b"]


def test_a_failed_batch_is_retried_per_job_and_only_the_bad_one_fails():
    jobs, backend = _jobs(3), Backend(bad={"r1"}, error=ContextTooLong)
    out = batched_call([(job, [f"r{job.index}"]) for job in jobs], backend, _no_check, "policy")
    assert backend.calls == 1 + 3
    assert set(out) == {id(jobs[0]), id(jobs[2])}
    assert jobs[1].error.startswith("policy failed: ContextTooLong")
    assert jobs[1].error_kind == "context_length"
    assert jobs[0].error is None and jobs[2].error is None


def test_an_unreachable_backend_fails_the_whole_batch_in_one_call():
    jobs, backend = _jobs(4), Backend(bad={"r0", "r1", "r2", "r3"}, error=BackendUnreachable)
    out = batched_call([(job, [f"r{job.index}"]) for job in jobs], backend, _no_check, "scorer")
    assert backend.calls == 1 and out == {}
    assert {job.error_kind for job in jobs} == {"unreachable"}


def test_recover_gives_a_failed_job_its_results_instead():
    jobs, backend = _jobs(2), Backend(bad={"r1"})
    out = batched_call([(job, [f"r{job.index}"]) for job in jobs], backend, _no_check, "scorer",
                       recover=lambda job, requests, exc: [np.nan] * len(requests))
    assert len(out[id(jobs[1])]) == 1 and jobs[1].error is None
