"""A query process's records reach the front's query log over the run directory's socket, unchanged; the sender
never waits: a full queue or an unreachable front drops records, counted."""

from __future__ import annotations

import asyncio

from metricsgw.querylog.channel import RecordSender, serve_records
from metricsgw.querylog.record import QueryRecord, Source


def _record(i: int) -> QueryRecord:
    return QueryRecord(query=f"sum(x{i})", source=Source("10.1.2.3", "POST", "/api/v1/query_range", "curl/8",
                                                          {"X-Panel-Id": str(i)}),
                       ts=1796400000.5 + i, status="timeout", limit="--query.timeout", error="timed out",
                       start=1796396400.0, end=1796400000.0, step=15, total_s=1.5, queue_s=0.25, eval_s=1.25,
                       samples=10, peak_samples=5, peak_bytes=1024, response_bytes=0)


async def _until(pred, what: str) -> None:
    for _ in range(6000):  # a liveness bound only
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(what)


def test_records_arrive_whole_and_in_order(tmp_path):
    async def main():
        got: list[QueryRecord] = []
        server = await serve_records(str(tmp_path / "queries.sock"), got.append)
        drops: list[str] = []
        sender = RecordSender(str(tmp_path / "queries.sock"), lambda reason, n: drops.append(reason))
        try:
            for i in range(50):
                sender.send(_record(i))
            await _until(lambda: len(got) == 50, "every record at the front")
        finally:
            await sender.close()
            server.close()
        assert got == [_record(i) for i in range(50)] and drops == []

    asyncio.run(main())


def test_a_full_queue_drops_instead_of_waiting(tmp_path):
    async def main():
        drops: list[str] = []
        sender = RecordSender(str(tmp_path / "queries.sock"), lambda reason, n: drops.append(reason), max_queued=2)
        for i in range(5):  # no await between them: the sending task has not run yet
            sender.send(_record(i))
        assert drops == ["channel_full"] * 3
        await sender.close()

    asyncio.run(main())


def test_a_front_that_is_not_there_costs_the_record_not_the_query(tmp_path):
    async def main():
        drops: list[str] = []
        sender = RecordSender(str(tmp_path / "nobody.sock"), lambda reason, n: drops.append(reason))
        sender.send(_record(1))
        await _until(lambda: drops == ["front_unreachable"], "the record counted as dropped")
        await sender.close()

    asyncio.run(main())
