"""Samples too far in the future or older than retention are refused (400 naming the setting),
counted by reason, and the rest of the request is stored; on the known-series fast path too."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.ingest.time_window import TOO_FAR_IN_FUTURE, TOO_OLD, SampleTimeWindow
from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher
from metricsgw.remote import codec
from metricsgw.storage.store import Storage
from metricsgw.telemetry import Telemetry
from tests.ingest.counters import discarded

NOW_MS = 1_800_000_000_000
MIN = 60_000
DAY = 86_400_000
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
WINDOW = SampleTimeWindow(grace_ms=10 * MIN, retention_ms=15 * DAY, clock=lambda: NOW_MS / 1000)


def decode(series, version=1):
    enc = codec.encode_v1 if version == 1 else codec.encode_v2
    return (codec.decode_v1 if version == 1 else codec.decode_v2)(enc(series, compress=False))


def series(name, samples):
    return ([("__name__", name)], samples)


MIXED = [
    series("good", [(NOW_MS - MIN, 1.0), (NOW_MS, 2.0)]),
    series("partly", [(NOW_MS, 3.0), (NOW_MS + 10 * 365 * DAY, 4.0), (INT64_MAX, 5.0)]),  # 10 years ahead, int64 max
    series("future_only", [(NOW_MS + 11 * MIN, 6.0)]),  # just over the 10 minutes of grace
    series("old_only", [(NOW_MS - 16 * DAY, 7.0), (INT64_MIN, 8.0)]),
    series("edges", [(NOW_MS + 10 * MIN, 9.0), (NOW_MS - 15 * DAY, 10.0)]),  # exactly on both bounds: kept
]


@pytest.mark.parametrize("version", [1, 2])
def test_out_of_window_samples_are_refused_and_the_rest_kept(storage, version):
    tel = Telemetry()
    pipe = IngestPipeline(storage, tel, time_window=WINDOW)
    batch, rejections = pipe.process(decode(MIXED, version))
    stored = {dict(lb)["__name__"] for _, lb in batch.new_series}
    assert stored == {"good", "partly", "edges"}  # a series left with no sample is not created
    assert sorted(zip(batch.t.tolist(), batch.v.tolist())) == sorted(
        [(NOW_MS - MIN, 1.0), (NOW_MS, 2.0), (NOW_MS, 3.0), (NOW_MS + 10 * MIN, 9.0), (NOW_MS - 15 * DAY, 10.0)])
    by_reason = {r.reason: r for r in rejections}
    assert set(by_reason) == {TOO_FAR_IN_FUTURE, TOO_OLD}
    future, old = by_reason[TOO_FAR_IN_FUTURE], by_reason[TOO_OLD]
    assert future.samples == 3 and old.samples == 2
    assert "3 samples of 2 series more than 10m ahead of the server's clock (--ingest.creation-grace-period)" \
        in future.message
    assert 'series {__name__="partly"} at 2037-01-12T08:00:00.000Z' in future.message
    assert "2 samples of 1 series older than the retention window of 15d (--storage.retention.time)" in old.message
    assert discarded(tel, TOO_FAR_IN_FUTURE) == 3 and discarded(tel, TOO_OLD) == 2


def test_known_series_fast_path_is_checked_too(storage):
    tel = Telemetry()
    pipe = IngestPipeline(storage, tel, time_window=WINDOW)
    first, _ = pipe.process(decode([series("known", [(NOW_MS, 1.0)])]))
    asyncio.run(storage.append(first))
    ok, rejections = pipe.process(decode([series("known", [(NOW_MS + MIN, 2.0)])]))  # cached: ints only
    assert rejections == [] and ok.v.tolist() == [2.0]
    batch, rejections = pipe.process(decode([series("known", [(NOW_MS + 2 * MIN, 3.0), (INT64_MAX, 4.0)])]))
    assert batch.v.tolist() == [3.0] and [r.reason for r in rejections] == [TOO_FAR_IN_FUTURE]
    assert discarded(tel, TOO_FAR_IN_FUTURE) == 1


def test_all_in_window_costs_no_copy(storage):
    decoded = decode([series("a", [(NOW_MS, 1.0)])])
    same, refused = WINDOW.apply(decoded)
    assert same is decoded and refused == []


def test_no_window_without_the_setting(storage):
    # the pipeline on its own (tests, replay tools) keeps every sample, as before
    batch, rejections = IngestPipeline(storage, Telemetry()).process(decode([series("a", [(1000, 1.0)])]))
    assert rejections == [] and batch.t.tolist() == [1000]


def test_write_request_is_400_naming_the_setting_and_the_rest_is_stored(tmp_path):
    """Through the real app: the sender gets a 400 (it must not retry), the valid samples are on disk."""
    now = int(time.time() * 1000)
    app = build_app(load({"storage.path": str(tmp_path / "data"), "ingest.creation-grace-period": "5m",
                          "storage.retention.time": "2d"}))
    body = codec.encode_v1([series("ok", [(now, 1.0)]), series("ahead", [(now + 3600_000, 2.0)]),
                            series("ancient", [(now - 3 * DAY, 3.0)]), series("max", [(INT64_MAX, 4.0)])])

    async def exchange():
        async with TestClient(TestServer(app)) as client:
            while not app[appkeys.STORAGE].ready:
                await asyncio.sleep(0.01)
            resp = await client.post("/api/v1/write", data=body, headers={"Content-Type": "application/x-protobuf",
                                                                           "Content-Encoding": "snappy"})
            metrics = await (await client.get("/metrics")).text()
            return resp.status, await resp.text(), metrics

    status, text, metrics = asyncio.run(exchange())
    assert status == 400, text
    assert "too_far_in_future: 2 samples of 2 series more than 5m ahead" in text and "--ingest.creation-grace-period" in text
    assert "too_old: 1 samples of 1 series older than the retention window of 2d (--storage.retention.time)" in text
    assert "(1 samples of valid series were stored)" in text
    assert 'metricsgw_discarded_samples_total{reason="too_far_in_future"} 2.0' in metrics
    assert 'metricsgw_discarded_samples_total{reason="too_old"} 1.0' in metrics
    st = Storage(str(tmp_path / "data"))
    st.open()
    try:
        found = st.select_series([Matcher("__name__", "=~", ".+")], None, None)
        assert [dict(lb)["__name__"] for lb in found.labels] == ["ok"]
        blk = st.read_samples(found.ids, -2**62, 2**62, QueryContext())
        assert blk.t.tolist() == [now] and np.array_equal(blk.v, [1.0])
    finally:
        st.close(flush=False)


@pytest.mark.parametrize("version", [1, 2])
def test_out_of_window_histograms_are_refused_and_exemplars_dropped(storage, version):
    from tests.native_requests import int_histogram, v1_request, v2_request

    body = (v1_request if version == 1 else v2_request)([
        {"labels": [("__name__", "h_ok")], "histograms": [int_histogram(NOW_MS), int_histogram(NOW_MS + 11 * MIN)],
         "exemplars": [([("trace_id", "in")], 1.0, NOW_MS), ([("trace_id", "out")], 1.0, NOW_MS - 16 * DAY)]},
        {"labels": [("__name__", "h_old_only")], "histograms": [int_histogram(NOW_MS - 16 * DAY)]},
    ], compress=False)
    tel = Telemetry()
    pipe = IngestPipeline(storage, tel, time_window=WINDOW)
    batch, rejections = pipe.process(codec.decode_v1(body) if version == 1 else codec.decode_v2(body))
    assert {dict(lb)["__name__"] for _, lb in batch.new_series} == {"h_ok"}
    assert batch.native.hist_t.tolist() == [NOW_MS] and batch.native.ex_t.tolist() == [NOW_MS]
    assert sorted((r.reason, r.message) for r in rejections) == [
        (TOO_FAR_IN_FUTURE, "1 native histograms ahead of the server's clock by more than 10m "
                            "(--ingest.creation-grace-period)"),
        (TOO_OLD, "1 native histograms older than the retention window of 15d (--storage.retention.time)")]
    r = tel.registry.get_sample_value
    assert r("metricsgw_discarded_histograms_total", {"reason": TOO_OLD}) == 1
    assert r("metricsgw_discarded_histograms_total", {"reason": TOO_FAR_IN_FUTURE}) == 1
