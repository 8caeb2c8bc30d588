"""Places for searching requests (``prmsearch.serve.admission``): first come, first served, a
bounded queue, and nothing held by a request that gave up while it waited."""

from __future__ import annotations

import asyncio
import time

import pytest

from prmsearch.serve.admission import Admission, QueueFull


async def never_gone() -> bool:
    return False


def run(coroutine):
    return asyncio.run(coroutine)


def test_places_go_in_arrival_order_and_past_the_queue_is_full():
    async def scenario() -> list[str]:
        admission = Admission(max_in_flight=1, max_queued=2)
        order: list[str] = []
        await admission.enter(never_gone, None)

        async def waiter(name: str) -> None:
            await admission.enter(never_gone, None, poll_s=0.01)
            order.append(name)
            await asyncio.sleep(0.01)
            admission.leave()

        tasks = [asyncio.create_task(waiter(name)) for name in ("a", "b")]
        await asyncio.sleep(0.05)
        assert (admission.in_flight, admission.queued) == (1, 2)
        with pytest.raises(QueueFull):
            await admission.enter(never_gone, None)
        admission.leave()
        await asyncio.gather(*tasks)
        assert (admission.in_flight, admission.queued) == (0, 0)
        return order

    assert run(scenario()) == ["a", "b"]


def test_a_deadline_passed_in_the_queue_frees_its_slot():
    async def scenario() -> None:
        admission = Admission(max_in_flight=1, max_queued=1)
        await admission.enter(never_gone, None)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await admission.enter(never_gone, time.monotonic() + 0.1, poll_s=0.02)
        assert time.monotonic() - start < 1.0
        assert admission.queued == 0
        admission.leave()
        assert admission.in_flight == 0

    run(scenario())


def test_a_client_gone_while_queued_takes_no_place():
    async def scenario() -> None:
        admission = Admission(max_in_flight=1, max_queued=4)
        await admission.enter(never_gone, None)

        async def gone() -> bool:
            return True

        with pytest.raises(ConnectionAbortedError):
            await admission.enter(gone, None, poll_s=0.01)
        assert admission.queued == 0
        admission.leave()
        assert admission.in_flight == 0
        await admission.enter(never_gone, None)  # the place is free again
        assert admission.in_flight == 1

    run(scenario())


def test_a_place_handed_to_a_cancelled_waiter_passes_on():
    async def scenario() -> None:
        admission = Admission(max_in_flight=1, max_queued=4)
        await admission.enter(never_gone, None)
        first = asyncio.create_task(admission.enter(never_gone, None, poll_s=10))
        second = asyncio.create_task(admission.enter(never_gone, None, poll_s=10))
        await asyncio.sleep(0.01)
        admission.leave()  # the place goes to the first waiter...
        first.cancel()  # ...which is cancelled before it runs again
        await asyncio.sleep(0.01)
        await asyncio.wait_for(second, 1.0)  # so the second waiter has it
        assert (admission.in_flight, admission.queued) == (1, 0)

    run(scenario())


def test_no_queue_turns_away_at_once():
    async def scenario() -> None:
        admission = Admission(max_in_flight=1, max_queued=0)
        await admission.enter(never_gone, None)
        with pytest.raises(QueueFull):
            await admission.enter(never_gone, None)

    run(scenario())
