"""The load driver's encoder (byte-identical to the codec) and its send/retry loop."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import snappy

from metricsgw.remote.codec import encode_v1
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from testkit import wire
from testkit.load import Plan, check_loopback, prepare, send_all
from testkit.receiver import start_receiver
from testkit.workload import Workload

T0 = 1_764_000_000_000


@pytest.fixture(scope="module")
def wl() -> Workload:
    return Workload(1, seed=3)


def test_encoder_is_byte_identical_to_codec(wl):
    labels = wl.series()[:300]
    ts = [T0, T0 + 15_000, 0]  # a zero timestamp is omitted by proto3, so must we
    vals = np.stack([wl.samples_at(t)[:300] for t in ts], axis=1)
    vals[0, 0], vals[1, 1], vals[2, 0] = 0.0, -0.0, np.nan
    cache: dict = {}
    mine = wire.encode_write_request([wire.encode_labels(lb, cache) for lb in labels], vals, ts)
    ref = encode_v1([(lb, list(zip(ts, vals[j]))) for j, lb in enumerate(labels)], compress=False)
    assert mine == ref
    assert wire.encode_metadata_request(wl.metadata()) == encode_v1([], wl.metadata(), compress=False)


def test_requests_cover_every_sample_once_in_time_order(wl):
    start, interval, scrapes = T0, 30_000, 5
    shards = wire.build_requests(wl, start, scrapes, interval, shards=3, samples_per_request=500,
                                 samples_per_series=2)
    seen: dict[tuple, list[int]] = {}
    values: dict[tuple, list[float]] = {}
    for shard in shards:
        for req in shard:
            msg = v1pb.WriteRequest.FromString(snappy.decompress(req.body))
            assert sum(len(ts.samples) for ts in msg.timeseries) == req.samples <= 500
            for ts in msg.timeseries:
                key = tuple((lb.name, lb.value) for lb in ts.labels)
                seen.setdefault(key, []).extend(s.timestamp for s in ts.samples)
                values.setdefault(key, []).extend(s.value for s in ts.samples)
    assert set(seen) == set(wl.series())
    want = [start + k * interval for k in range(scrapes)]
    assert all(times == want for times in seen.values())  # every sample once, in order per series
    at = np.stack([wl.samples_at(t) for t in want], axis=1)
    for i in (0, 7, wl.num_series - 1):
        assert values[wl.series()[i]] == at[i].tolist()


def test_send_retries_5xx_and_429_but_not_400(wl):
    async def run():
        runner, url, got = await start_receiver([503, 429, 204, 400])
        try:
            _w, pre, shards = prepare(Plan(nodes=1, duration_s=45, interval_s=15, connections=1,
                                           end_ms=T0), workload=wl)
            res = await send_all(url, shards, time_limit_s=30, preamble=pre)
        finally:
            await runner.cleanup()
        return res, got, shards

    res, got, shards = asyncio.run(run())
    n = sum(len(s) for s in shards) + 1  # + the metadata request
    # metadata: 503, 429, then ok; first data request: 400 (dropped, not retried); the rest ok
    assert res.retries == 2
    assert res.requests_failed == 1 and res.requests_ok == n - 1
    assert len(got) == n + 2
    assert res.status_counts == {"503": 1, "429": 1, "400": 1, "204": n - 1}
    assert res.samples_ok + res.samples_failed == wl.num_series * 3
    assert res.first_error.startswith("503")


def test_refuses_non_loopback_targets():
    check_loopback("http://127.0.0.1:9090/api/v1/write")
    check_loopback("http://localhost:9090/api/v1/write")
    with pytest.raises(ValueError):
        check_loopback("http://10.1.2.3:9090/api/v1/write")
    with pytest.raises(ValueError):
        check_loopback("http://example.com/api/v1/write")
