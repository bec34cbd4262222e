"""Ingest limits end to end with tiny limits: 400 naming the limit, the flag and the series; the
rest of the request stored; discarded samples counted by reason; existing series keep ingesting.
And /api/v1/status/tsdb?limit=3 has Prometheus's shape (checked against real Prometheus)."""

from __future__ import annotations

import time

import pytest

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw, start_prometheus
from tests.e2e.client import api, remote_write
from tests.guard.helpers import metric

PER_METRIC, TOTAL, MAX_LABELS, MAX_VALUE_LEN = 5, 12, 6, 64
DISCARDED = "metricsgw_discarded_samples_total"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_metricsgw(tmp_path_factory.mktemp("guard-ingest"), extra=[
        f"--ingest.max-series-per-metric={PER_METRIC}", f"--ingest.max-series={TOTAL}",
        f"--ingest.max-label-names-per-series={MAX_LABELS}", f"--ingest.max-label-value-length={MAX_VALUE_LEN}"])
    srv.wait_ready()
    yield srv
    srv.stop()


def _series(name: str, t_ms: int, v: float, **labels):
    return (sorted({"__name__": name, "job": "guard", **labels}.items()), [(t_ms, v)])


def _stored(base: str, selector: str, t_s: float) -> dict[str, str]:
    """{pod: value} of the instant query at t_s."""
    status, body = api(base, "/api/v1/query", {"query": selector, "time": t_s})
    assert status == 200, body
    return {r["metric"].get("pod", ""): r["value"][1] for r in body["data"]["result"]}


def test_series_per_metric_limit(server):
    t = int(time.time() * 1000) // 1000 * 1000
    before = metric(server.base_url, DISCARDED, reason="max_series_per_metric")
    body = encode_v1([_series("gpu_busy", t, i, pod=f"p{i}") for i in range(PER_METRIC + 3)])
    status, text, _ = remote_write(server.base_url, body)
    assert status == 400, text
    assert "3 series rejected, 3 samples not stored (5 samples of valid series were stored)" in text
    assert "max_series_per_metric" in text and f"--ingest.max-series-per-metric={PER_METRIC}" in text
    assert 'gpu_busy{job="guard", pod="p5"}' in text  # names the series
    assert _stored(server.base_url, "gpu_busy", t / 1000) == {f"p{i}": str(i) for i in range(PER_METRIC)}
    assert metric(server.base_url, DISCARDED, reason="max_series_per_metric") == before + 3

    # the admitted series keep ingesting; the refused ones stay refused
    t2 = t + 15_000
    status, text, _ = remote_write(server.base_url, encode_v1(
        [_series("gpu_busy", t2, 100 + i, pod=f"p{i}") for i in range(PER_METRIC + 3)]))
    assert status == 400 and "3 series rejected" in text, text
    assert _stored(server.base_url, "gpu_busy", t2 / 1000) == {f"p{i}": str(100 + i) for i in range(PER_METRIC)}
    assert metric(server.base_url, DISCARDED, reason="max_series_per_metric") == before + 6


def test_label_shape_limits_keep_the_valid_rest(server):
    t = int(time.time() * 1000) // 1000 * 1000
    long_value = "x" * (MAX_VALUE_LEN + 1)
    many = {f"l{i}": "v" for i in range(MAX_LABELS)}  # + __name__ + job = MAX_LABELS + 2
    before = {r: metric(server.base_url, DISCARDED, reason=r)
              for r in ("label_value_too_long", "max_label_names_per_series")}
    status, text, _ = remote_write(server.base_url, encode_v1([
        _series("shape_ok", t, 1, pod="a"),
        _series("shape_long", t, 2, pod=long_value),
        _series("shape_many", t, 3, **many),
    ]))
    assert status == 400, text
    assert "2 series rejected" in text and "(1 samples of valid series were stored)" in text
    assert f"--ingest.max-label-value-length={MAX_VALUE_LEN}" in text and "shape_long{" in text
    assert f"--ingest.max-label-names-per-series={MAX_LABELS}" in text and "shape_many{" in text
    assert _stored(server.base_url, "shape_ok", t / 1000) == {"a": "1"}
    assert _stored(server.base_url, '{__name__=~"shape_long|shape_many"}', t / 1000) == {}
    for reason, n in before.items():
        assert metric(server.base_url, DISCARDED, reason=reason) == n + 1, reason


def test_total_series_limit(server):
    """Runs after the others: 5 gpu_busy + 1 shape_ok series exist; TOTAL=12 leaves room for 6."""
    t = int(time.time() * 1000) // 1000 * 1000
    time.sleep(1.1)  # the cached active-series count is refreshed at most once a second
    before = metric(server.base_url, DISCARDED, reason="max_series")
    status, text, _ = remote_write(server.base_url, encode_v1(
        [_series(f"fleet_{i}", t, i) for i in range(10)]))
    assert status == 400, text
    assert "4 series rejected" in text and f"--ingest.max-series={TOTAL}" in text, text
    assert metric(server.base_url, DISCARDED, reason="max_series") == before + 4
    status, body = api(server.base_url, "/api/v1/series", {"match[]": '{__name__=~"fleet_.*"}'})
    assert status == 200 and len(body["data"]) == 6


# --------------------------------------------------------------------------- tsdb status shape

def _shape(x):
    """The JSON's keys and value types, recursively (lists by their first element)."""
    if isinstance(x, dict):
        return {k: _shape(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_shape(x[0])] if x else []
    return type(x).__name__


def test_tsdb_status_shape_equals_prometheus(tmp_path):
    t = int(time.time() * 1000) // 1000 * 1000
    # no ties in the compared tops: metric_m has m+3 series; pod has 7 values, __name__ 5, node 3, job 1
    series = [_series(f"metric_{m}", t, 1.0, pod=f"p{p}", node=f"n{p % 3}") for m in range(5) for p in range(m + 3)]
    body = encode_v1(series)
    gw = start_metricsgw(tmp_path / "gw")
    prom = start_prometheus(tmp_path / "prom")
    try:
        gw.wait_ready()
        prom.wait_ready()
        for srv in (gw, prom):
            status, text, _ = remote_write(srv.base_url, body)
            assert status == 204, (srv.name, text)
        answers = {}
        for srv in (gw, prom):
            status, out = api(srv.base_url, "/api/v1/status/tsdb", {"limit": "3"})
            assert status == 200 and out["status"] == "success", (srv.name, out)
            answers[srv.name] = out["data"]
    finally:
        gw.stop()
        prom.stop()
    ours, theirs = answers["metricsgw"], answers["prometheus"]
    assert _shape(ours) == _shape(theirs), (ours, theirs)
    # Prometheus 2.42 ignores `limit` here (a later addition) and answers its default 10:
    # ours must be its top 3. Same data, same counts (the top entries have no ties here).
    for key in ("seriesCountByMetricName", "labelValueCountByLabelName", "memoryInBytesByLabelName",
                "seriesCountByLabelValuePair"):
        assert len(ours[key]) == 3 and len(theirs[key]) >= 3, key
    assert ours["seriesCountByMetricName"] == theirs["seriesCountByMetricName"][:3]
    assert ours["labelValueCountByLabelName"] == theirs["labelValueCountByLabelName"][:3]
    assert ours["headStats"]["numSeries"] == theirs["headStats"]["numSeries"] == len(series)
