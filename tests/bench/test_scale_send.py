"""bench.scale's real-time sender against a real HTTP receiver: Prometheus-like retries, failures
counted, every series' samples in time order at their due times."""

from __future__ import annotations

import asyncio

import snappy

from bench import scale_wire
from bench.scale_send import Sender
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from testkit import wire
from testkit.receiver import start_receiver
from testkit.workload import Workload


def test_sender_retries_5xx_and_429_fails_4xx_and_keeps_series_in_order():
    wl = Workload(1, seed=2)
    cache: dict = {}
    labels = [wire.encode_labels(lb, cache) for lb in wl.series()]
    tpl = scale_wire.Template(labels, series_per_request=3000)

    async def run():
        runner, url, got = await start_receiver([503, 429, 400])
        try:
            sender = Sender(url, wl, tpl, interval_s=1.0, connections=2)
            task = asyncio.create_task(sender.run())
            for _ in range(600):
                await asyncio.sleep(0.05)
                if {0, 1, 2} <= sender.done_scrapes:
                    break
            sender.stop_scheduling()
            drained = await sender.drain(timeout_s=30.0)
            await task
        finally:
            await runner.cleanup()
        return sender, drained, got

    sender, drained, got = asyncio.run(run())
    assert drained["requests_not_sent"] == 0
    recs = sender.records
    assert sum(r.retries for r in recs) == 2  # the 503 and the 429 were retried
    failed = [r for r in recs if not r.ok]
    assert len(failed) == 1  # the 400 was not retried
    assert sender.status_counts["503"] == sender.status_counts["429"] == sender.status_counts["400"] == 1
    assert all(r.ack >= r.first_send for r in recs)
    # what the receiver took: each scrape's requests stamped at their due times, in time order per series
    times: dict[tuple, list[int]] = {}
    for body in got:
        for ts in v1pb.WriteRequest.FromString(snappy.decompress(body)).timeseries:
            times.setdefault(tuple((x.name, x.value) for x in ts.labels), []).extend(s.timestamp for s in ts.samples)
    assert set(times) == set(wl.series())
    due_ms = {int(round(r.due * 1000)) for r in recs}
    for ts in times.values():
        assert ts == sorted(ts) and set(ts) <= due_ms
    done = [k for k in sorted({r.scrape for r in recs}) if k in sender.done_scrapes]
    assert len(done) >= 3
    per_scrape = {k: sum(r.samples for r in recs if r.scrape == k) for k in done}
    assert set(per_scrape.values()) == {wl.num_series}
