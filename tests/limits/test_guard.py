"""The query guard: concurrency, FIFO hand-over, queue full -> 429, queue timeout -> 503."""

from __future__ import annotations

import asyncio

import pytest

from metricsgw.errors import TooManyRequests, Unavailable
from metricsgw.limits.guard import QueryGuard
from metricsgw.telemetry import Telemetry


def rejections(tel, limit):
    return tel.guard_rejections.labels(limit=limit)._value.get()


def test_queue_full_is_429_with_retry_after():
    async def main():
        tel = Telemetry()
        guard = QueryGuard(1, 1, 30.0, tel)
        release = asyncio.Event()

        async def hold():
            async with guard.slot("query"):
                await release.wait()

        running = asyncio.create_task(hold())
        await asyncio.sleep(0)
        queued = asyncio.create_task(hold())
        await asyncio.sleep(0)
        assert guard.running == 1 and guard.queued == 1
        assert tel.queries_inflight._value.get() == 1 and tel.queries_queued._value.get() == 1
        with pytest.raises(TooManyRequests) as err:
            async with guard.slot("query_range"):
                pass
        assert err.value.status == 429 and "Retry-After" in err.value.headers
        assert "--query.max-queue=1" in str(err.value) and "--query.max-concurrency=1" in str(err.value)
        assert rejections(tel, "max_queue") == 1
        release.set()
        await asyncio.gather(running, queued)
        assert guard.running == 0 and guard.queued == 0 and tel.queries_inflight._value.get() == 0

    asyncio.run(main())


def test_queue_timeout_is_503():
    async def main():
        tel = Telemetry()
        guard = QueryGuard(1, 5, 0.05, tel)
        release = asyncio.Event()

        async def hold():
            async with guard.slot():
                await release.wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0)
        with pytest.raises(Unavailable) as err:
            async with guard.slot("query"):
                pass
        assert err.value.status == 503 and "--query.queue-timeout" in str(err.value)
        assert rejections(tel, "queue_timeout") == 1
        assert guard.queued == 0
        release.set()
        await task
        assert guard.running == 0

    asyncio.run(main())


def test_slots_are_handed_over_in_arrival_order_and_never_exceed_concurrency():
    async def main():
        guard = QueryGuard(2, 10, 30.0)
        order, peak = [], 0

        async def work(i):
            nonlocal peak
            async with guard.slot():
                peak = max(peak, guard.running)
                order.append(i)
                await asyncio.sleep(0)

        await asyncio.gather(*(work(i) for i in range(8)))
        assert order == list(range(8)) and peak == 2 and guard.running == 0

    asyncio.run(main())


def test_cancelled_waiter_leaves_the_queue_and_slot_survives_errors():
    async def main():
        guard = QueryGuard(1, 5, 30.0)
        release = asyncio.Event()

        async def hold():
            async with guard.slot():
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert guard.queued == 0
        release.set()
        await holder
        with pytest.raises(RuntimeError):
            async with guard.slot():
                raise RuntimeError("query failed")
        assert guard.running == 0

    asyncio.run(main())
