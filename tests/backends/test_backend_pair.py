"""Loading the policy and the PRM together (`prmsearch.engines.backend_pair`): both at once on a
CPU, errors in the sequential order, and no backend left running after a failed load."""

from __future__ import annotations

import threading

import pytest

from prmsearch.engines.backend_pair import close_together, load_together, start_together


class Backend:
    """A loaded backend that records its close."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_concurrent_loads_run_at_the_same_time():
    # each loader waits for the other: only two threads at once get past the barrier
    barrier = threading.Barrier(2, timeout=10)

    def load(name):
        barrier.wait()
        return Backend(name)

    policy, scorer = load_together(lambda: load("policy"), lambda: load("scorer"), concurrent=True)
    assert (policy.name, scorer.name) == ("policy", "scorer")


def test_sequential_loads_keep_the_order():
    order = []
    policy, scorer = load_together(lambda: order.append("policy") or "p",
                                   lambda: order.append("scorer") or "s", concurrent=False)
    assert (policy, scorer, order) == ("p", "s", ["policy", "scorer"])


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_failed_scorer_closes_the_loaded_policy(concurrent):
    policy = Backend("policy")

    def scorer():
        raise ValueError("no such PRM")

    with pytest.raises(ValueError, match="no such PRM"):
        load_together(lambda: policy, scorer, concurrent=concurrent)
    assert policy.closed == 1


def test_a_failed_policy_is_the_error_raised_and_the_scorer_is_closed():
    scorer = Backend("scorer")

    def policy():
        raise FileNotFoundError("no policy folder")

    with pytest.raises(FileNotFoundError, match="no policy folder"):
        load_together(policy, lambda: scorer, concurrent=True)
    assert scorer.closed == 1


def test_when_both_fail_the_policy_error_wins():
    def policy():
        raise FileNotFoundError("policy")

    def scorer():
        raise ValueError("scorer")

    with pytest.raises(FileNotFoundError, match="policy"):
        load_together(policy, scorer, concurrent=True)


def test_only_a_vllm_engine_on_a_cpu_starts_beside_the_other_backend():
    import torch

    assert start_together("vllm", None) is not torch.cuda.is_available()
    assert start_together(None, "vllm") is not torch.cuda.is_available()
    assert start_together("hf", "hf") is False  # transformers loads are seconds: one after the other
    assert start_together("openai", None) is False


def test_close_together_closes_each_once_and_skips_what_has_no_close():
    a, b = Backend("a"), Backend("b")

    class Failing(Backend):
        def close(self) -> None:
            super().close()
            raise RuntimeError("engine already gone")

    c = Failing("c")
    close_together(a, object(), b, c, a)  # a close that fails does not stop the others
    assert (a.closed, b.closed, c.closed) == (1, 1, 1)  # a, given twice (policy and scorer), once
