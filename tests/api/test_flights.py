"""Identical range queries in flight share one evaluation; a waiter never inherits another request's failure."""

from __future__ import annotations

import asyncio

import pytest

from metricsgw.api.flights import Flights
from metricsgw.errors import QueryTimeout


def test_identical_requests_share_one_evaluation():
    async def main():
        flights, calls, gate = Flights(), [], asyncio.Event()

        async def evaluate():
            calls.append(1)
            await gate.wait()
            return b"answer"

        tasks = [asyncio.create_task(flights.run("q", 10, evaluate)) for _ in range(4)]
        await asyncio.sleep(0.01)
        gate.set()
        return await asyncio.gather(*tasks), calls

    answers, calls = asyncio.run(main())
    assert answers == [b"answer"] * 4 and len(calls) == 1


def test_a_waiter_evaluates_itself_when_the_evaluation_it_waited_for_failed():
    async def main():
        flights, gate = Flights(), asyncio.Event()

        async def fails():
            await gate.wait()
            raise QueryTimeout("the first request's own deadline")

        async def works():
            return b"mine"

        first = asyncio.create_task(flights.run("q", 10, fails))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(flights.run("q", 10, works))
        await asyncio.sleep(0.01)
        gate.set()
        with pytest.raises(QueryTimeout):
            await first
        return await second

    assert asyncio.run(main()) == b"mine"


def test_a_waiter_evaluates_itself_when_the_first_client_left():
    async def main():
        flights, gate = Flights(), asyncio.Event()

        async def slow():
            await gate.wait()
            return b"first"

        first = asyncio.create_task(flights.run("q", 10, slow))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(flights.run("q", 10, lambda: asyncio.sleep(0, b"second")))
        await asyncio.sleep(0.01)
        first.cancel()
        return await second

    assert asyncio.run(main()) == b"second"


def test_a_waiter_keeps_its_own_deadline():
    async def main():
        flights = Flights()
        first = asyncio.create_task(flights.run("q", 10, lambda: asyncio.sleep(5, b"late")))
        await asyncio.sleep(0.01)
        try:
            with pytest.raises(QueryTimeout):
                await flights.run("q", 0.05, lambda: asyncio.sleep(0, b"never asked"))
        finally:
            first.cancel()

    asyncio.run(main())


def test_different_requests_do_not_wait_for_each_other():
    async def main():
        flights, gate = Flights(), asyncio.Event()
        first = asyncio.create_task(flights.run("a", 10, gate.wait))
        await asyncio.sleep(0.01)
        got = await flights.run("b", 10, lambda: asyncio.sleep(0, b"b"))
        gate.set()
        await first
        return got

    assert asyncio.run(main()) == b"b"
