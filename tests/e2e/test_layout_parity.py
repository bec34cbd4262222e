"""The default layout (a front, ingest shards, query processes of their own) answers what a one-process gateway
(--server.single-process) answers on the same writes, with nothing flushed yet: every answer then comes from
the shards' memory through ``?scope=head`` (docs/cluster.md) -- native histograms (remote read's
TimeSeries.histograms), exemplars, metric metadata and /api/v1/status/tsdb. Float samples, series and labels
are covered by tests/e2e/test_processes.py; they are compared here too, as the control."""

from __future__ import annotations

import pytest

from metricsgw.remote.codec import encode_v1
from metricsgw.model import MetricMetadata
from testkit.procs import start_metricsgw
from tests.dashboards.loading import INTERVAL_MS, aligned_now_ms
from tests.e2e.client import api, remote_write
from tests.e2e.compare import diff
from tests.e2e.test_native_differential import series_at
from tests.native_requests import v1_request, v2_request

SCRAPES = 41
# Never flushed while the test runs: the shards' heads are the only place the data is.
UNFLUSHED = ["--storage.flush-interval=1h", "--storage.flush-max-samples=100000000"]
LAYOUTS = {"default": ["--ingest.shards=2", "--query.processes=1"], "single": ["--server.single-process"]}
METADATA = [MetricMetadata("ex_requests_total", "counter", "Requests served.", ""),
            MetricMetadata("up_gauge", "gauge", "A gauge.", "seconds"),
            MetricMetadata("up_gauge", "gauge", "The same gauge, described again.", "seconds")]

HISTOGRAM_QUERIES = ["nh", "nh_float", 'nh{proto="2"}', "histogram_count(nh)", "histogram_quantile(0.9, nh)",
                     "rate(nh[5m])", "sum by (kind) (nh)", "histogram_quantile(0.5, sum by (proto) (rate(nh[5m])))",
                     "rate(nh_change[5m])", "count(nh)", "ex_requests_total", "up_gauge"]


def _send(url: str, body: bytes, version: int) -> None:
    status, text, _ = remote_write(url, body, version)
    assert status == 204, (url, status, text)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The default layout and one process, written the same; and a third gateway (default layout) on the first
    one's --storage.path that receives no writes and has it as its --cluster.peers: what a gateway on another
    machine reads of the first one's memory (through its front's ?scope=head)."""
    work = tmp_path_factory.mktemp("layout-parity")
    gws = {name: start_metricsgw(work / name, extra=[*flags, *UNFLUSHED]) for name, flags in LAYOUTS.items()}
    gws["default"].wait_ready()
    peer = start_metricsgw(work / "peer", extra=[*UNFLUSHED, f"--storage.path={work / 'default' / 'data'}",
                                                 "--storage.writer-id=gw1", f"--cluster.peers={gws['default'].base_url}"])
    try:
        for gw in [*gws.values(), peer]:
            gw.wait_ready()
        end_ms = aligned_now_ms()
        start_ms = end_ms - (SCRAPES - 1) * INTERVAL_MS
        for k in range(SCRAPES):
            t = start_ms + k * INTERVAL_MS
            gauges = encode_v1([([("__name__", "up_gauge"), ("i", str(i))], [(t, float(i + k))]) for i in range(40)],
                               METADATA)
            for gw in gws.values():
                _send(gw.base_url, v1_request(series_at(k, t, "1")), 1)
                _send(gw.base_url, v2_request(series_at(k, t, "2")), 2)
                _send(gw.base_url, gauges, 1)
        yield {**{n: gw.base_url for n, gw in gws.items()}, "peer": peer.base_url}, start_ms / 1000, end_ms / 1000, work
    finally:
        for gw in [peer, *gws.values()]:
            gw.stop()


def _same(pair, path: str, params: dict | list, sort: bool = False, layouts=("default", "peer")) -> dict:
    for layout in layouts:
        want = _same_as_one_process(pair, layout, path, params, sort)
    return want


def _same_as_one_process(pair, layout: str, path: str, params: dict | list, sort: bool) -> dict:
    urls = pair[0]
    (s_got, got), (s_want, want) = api(urls[layout], path, params), api(urls["single"], path, params)
    assert (s_got, got.get("warnings")) == (s_want, want.get("warnings")) == (200, None), (layout, path, params, got)
    if isinstance(want["data"], dict) and "resultType" in want["data"]:
        problems = diff(got["data"], want["data"])
        assert not problems, f"{layout}: {path} {params}: " + "\n".join(problems[:6])
    elif sort:
        assert sorted(map(sorted_items, got["data"])) == sorted(map(sorted_items, want["data"])), (layout, path)
    else:  # the API's data exactly, order included
        assert got["data"] == want["data"], (layout, path, params)
    return want["data"]


def sorted_items(d: dict) -> list:
    return sorted(d.items())


def test_nothing_was_flushed(pair):
    work = pair[3]
    assert not [p for p in work.rglob("*.parquet") if "_delta_log" not in p.parts]


@pytest.mark.parametrize("query", HISTOGRAM_QUERIES)
def test_histogram_queries_equal_one_process(pair, query):
    _, start_s, end_s, _ = pair
    for t in (end_s, end_s - 123.4, start_s + 300):
        _same(pair, "/api/v1/query", {"query": query, "time": f"{t:.3f}"})
    _same(pair, "/api/v1/query_range", {"query": query, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": "37"})


def test_the_reference_holds_histograms_in_memory(pair):
    """A one-process gateway answers histograms (else equal empty answers would prove nothing)."""
    _, _, end_s, _ = pair
    data = _same(pair, "/api/v1/query", {"query": "nh", "time": end_s})
    assert len([r for r in data["result"] if "histogram" in r]) == 8


@pytest.mark.parametrize("query", ["ex_requests_total", '{__name__=~"ex_.*"}', 'ex_requests_total{proto="2"}',
                                   "rate(ex_requests_total[5m]) + nh_float"])
def test_exemplars_equal_one_process(pair, query):
    _, start_s, end_s, _ = pair
    data = _same(pair, "/api/v1/query_exemplars", {"query": query, "start": start_s, "end": end_s})
    assert query.startswith("rate") or sum(len(s["exemplars"]) for s in data) > 20
    _same(pair, "/api/v1/query_exemplars", {"query": query, "start": end_s - 200, "end": end_s - 100})


@pytest.mark.parametrize("params", [{}, {"limit": "1"}, {"metric": "up_gauge"}, {"metric": "nothing"}])
def test_metadata_equals_one_process(pair, params):
    data = _same(pair, "/api/v1/metadata", params)
    if not params:
        assert len(data["up_gauge"]) == 2 and data["ex_requests_total"][0]["help"] == "Requests served."


@pytest.mark.parametrize("params", [{}, {"limit": "3"}])
def test_tsdb_status_equals_one_process(pair, params):
    # the gateway's own series (its shards'); another gateway's page is its own, as each Prometheus's is
    data = _same(pair, "/api/v1/status/tsdb", params, layouts=("default",))
    assert data["headStats"]["numSeries"] == 40 + 2 * 9  # the gauges; 9 histogram and float series a protocol


def test_tsdb_status_over_a_window_and_of_a_metric_equals_one_process(pair):
    """The Cardinality page's calls: every partition over a window, one metric's labels, a label's values."""
    _, start_s, end_s, _ = pair
    whole = _same(pair, "/api/v1/status/tsdb", {"start": start_s - 60, "end": end_s}, layouts=("default",))
    assert whole["headStats"]["numSeries"] == 40 + 2 * 9
    gauges = _same(pair, "/api/v1/status/tsdb", {"match[]": "up_gauge", "focusLabel": "i", "topN": "3"},
                   layouts=("default",))
    assert gauges["headStats"]["numSeries"] == 40 and len(gauges["seriesCountByFocusLabelValue"]) == 3


def test_series_and_labels_equal_one_process(pair):
    _, start_s, end_s, _ = pair
    window = {"start": start_s, "end": end_s}
    # the series API's order is not Prometheus's to keep either (2.42 sorts only for several match[])
    _same(pair, "/api/v1/series", {"match[]": '{__name__=~".+"}', **window}, sort=True)
    _same(pair, "/api/v1/labels", window)
    _same(pair, "/api/v1/label/kind/values", window)
