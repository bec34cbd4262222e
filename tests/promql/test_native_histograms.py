"""Native histograms decoded and shown as Prometheus 2.42 shows them, including custom buckets
(schema -53, which 2.42 cannot be asked about: expectations written out by hand here)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.model import canonical, series_id
from metricsgw.promql import native
from metricsgw.promql.engine import Engine
from metricsgw.promql.render import render
from metricsgw.storage.batch import AppendBatch, NativeSamples
from metricsgw.storage.store import Storage
from tests.native_requests import histogram_bytes, int_histogram

CUSTOM = {"count_int": 3, "sum": 2.5, "schema": -53, "positive_spans": [(0, 3)], "positive_deltas": [1, 0, 0],
          "custom_values": [0.1, 0.5], "timestamp": 0}


def test_integer_histogram_buckets_in_order_with_boundary_rules():
    h = native.decode(histogram_bytes(int_histogram(0)))
    assert native.to_json(h) == {"count": "12", "sum": "18.4", "buckets": [
        [1, "-4", "-2", "1"], [1, "-2", "-1", "2"], [3, "-0.001", "0.001", "2"],
        [0, "0.5", "1", "1"], [0, "1", "2", "2"], [0, "4", "8", "1"], [0, "8", "16", "3"]]}


def test_custom_buckets_take_their_bounds_from_custom_values():
    h = native.decode(histogram_bytes(CUSTOM))
    assert native.to_json(h) == {"count": "3", "sum": "2.5", "buckets": [
        [3, "-Inf", "0.1", "1"], [0, "0.1", "0.5", "1"], [0, "0.5", "+Inf", "1"]]}
    assert native.quantile(0.5, h) == 0.1 + (0.5 - 0.1) * (0.5 / 1.0)
    assert native.quantile(1.0, h) == float("inf")
    assert native.fraction(0.1, 0.5, h) == 1 / 3


def test_a_zero_count_and_empty_histogram():
    h = native.decode(histogram_bytes({"count_int": 0, "sum": 0.0, "schema": 3, "timestamp": 0}))
    assert native.to_json(h) == {"count": "0", "sum": "0"}
    assert np.isnan(native.quantile(0.5, h)) and np.isnan(native.fraction(0, 1, h))


@pytest.fixture
def storage_with_custom_buckets(tmp_path):
    st = Storage(str(tmp_path))
    st.open()
    now = int(time.time()) * 1000
    labels = canonical([("__name__", "nhcb")])
    sid = series_id(labels)
    blobs = [histogram_bytes(CUSTOM | {"timestamp": now - 60_000 + k * 15_000}) for k in range(4)]
    nat = NativeSamples(np.full(4, sid, np.int64), np.array([now - 60_000 + k * 15_000 for k in range(4)]), blobs)
    asyncio.run(st.append(AppendBatch(new_series=[(sid, labels)], native=nat)))
    yield st, now
    st.close(flush=False)


def test_custom_bucket_histograms_are_selected_and_added(storage_with_custom_buckets):
    st, now = storage_with_custom_buckets
    engine = Engine(st)
    out = render(engine.instant("nhcb", now / 1000, QueryContext()))
    assert out["result"] == [{"metric": {"__name__": "nhcb"}, "histogram": [
        now // 1000, native.to_json(native.decode(histogram_bytes(CUSTOM)))]}]  # at the evaluation time
    assert render(engine.instant("histogram_count(nhcb)", now / 1000, QueryContext()))["result"][0]["value"][1] == "3"
    summed = render(engine.instant("sum(nhcb)", now / 1000, QueryContext()))["result"][0]["histogram"][1]
    assert summed == native.to_json(native.decode(histogram_bytes(CUSTOM)))
    assert render(engine.instant("histogram_count(nhcb + nhcb)", now / 1000, QueryContext()))["result"][0]["value"][1] == "6"


def test_float_queries_do_not_select_their_series_twice_when_other_metrics_hold_histograms(
        storage_with_custom_buckets):
    st, now = storage_with_custom_buckets
    labels = [canonical([("__name__", "floats"), ("i", str(i))]) for i in range(3)]
    sids = [series_id(lb) for lb in labels]
    asyncio.run(st.append(AppendBatch(new_series=list(zip(sids, labels)), sid=np.array(sids, np.int64),
                                      t=np.full(3, now - 1000, np.int64), v=np.ones(3))))
    assert st.histogram_metrics() == {"nhcb"}
    engine = Engine(st)
    for query in ("floats", "sum(rate(floats[5m]))", "histogram_count(floats)"):
        # the 3 series selected once: within max_series=3 (a histogram lookup would select them again)
        engine.instant(query, now / 1000, QueryContext(max_series=3))
    st.flush()
    assert st.histogram_metrics() == {"nhcb"}, "and from the file's footer once flushed"


def test_quantile_zero_in_an_empty_first_bucket_is_nan_as_in_go():
    """rank 0 stops in the first bucket; with a count of 0 there Go computes 0/0 = NaN (no error)."""
    h = native.decode(histogram_bytes({"count_int": 3, "sum": 1.0, "schema": 0, "positive_spans": [(0, 2)],
                                       "positive_deltas": [0, 3], "timestamp": 0}))
    assert np.isnan(native.quantile(0.0, h))
    assert native.quantile(0.5, h) == 1 + (2 - 1) * (1.5 / 3)
    assert native.quantile(1.0, h) == 2.0


def test_histograms_are_read_through_the_cluster_source(storage_with_custom_buckets):
    """With --cluster.peers, queries read through ClusterSource: the histograms of the local storage
    (and of the table) still answer (here with no peer to ask)."""
    from metricsgw.cluster.peers import PeerFanout
    from metricsgw.cluster.source import ClusterSource
    from metricsgw.telemetry import Telemetry

    st, now = storage_with_custom_buckets
    engine = Engine(ClusterSource(st, PeerFanout([], 1.0, Telemetry())))
    out = render(engine.instant("histogram_count(nhcb)", now / 1000, QueryContext()))
    assert out["result"] == [{"metric": {}, "value": [now // 1000, "3"]}]
