"""Differential test for native histograms and exemplars: real Prometheus 2.42 (native-histograms and
exemplar-storage enabled) and metricsgw fed the same remote-write requests, asked the same queries.

40 minutes at 15 s of: integer histograms (schemas 0 and 3, zero and negative buckets, a counter
reset, a stale marker and a gap), a float histogram (schema 1), and a float counter with exemplars.
2.42 predates remote write 2.0, so the ``proto="2"`` copies of the same histograms and exemplars
reach metricsgw by 2.0 and Prometheus by 1.0: equal answers show both decoders store the same.
metricsgw flushes to Parquet several times meanwhile, so answers come from files and head merged.
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request

import pytest

from metricsgw.model import STALE_NAN
from testkit.procs import start_metricsgw, start_prometheus
from tests.dashboards.loading import INTERVAL_MS, aligned_now_ms
from tests.e2e.client import api, remote_write
from tests.e2e.compare import diff
from tests.native_requests import v1_request, v2_request

SCRAPES = 161
INSTANTS = [0, -7.5, -600, -1234.567, -2400 + 50, 100, 400]
RANGES = [(-1800 + 3.3, 0, "37"), (-2400, 360, "61s"), (-700, -500, "7")]

QUERIES = [
    "nh", "nh_float", '{__name__=~"nh.*"}', 'nh{kind="stale"}', 'nh{proto="2"}',
    "histogram_count(nh)", "histogram_sum(nh)", "histogram_count(nh_float)", "histogram_sum(nh_float)",
    'histogram_count({__name__=~"nh.*"})',
    "histogram_quantile(0.9, nh)", "histogram_quantile(0.5, nh)", "histogram_quantile(0.01, nh)",
    "histogram_quantile(0, nh)", "histogram_quantile(1, nh)", "histogram_quantile(0.5, nh_float)",
    "histogram_quantile(0.99, nh_float)", "histogram_quantile(1.5, nh)", "histogram_quantile(-1, nh_float)",
    "histogram_fraction(0, 4, nh)", "histogram_fraction(-1, 1, nh)", "histogram_fraction(-Inf, 0.5, nh_float)",
    "histogram_fraction(0.001, +Inf, nh_float)", "histogram_fraction(2, 1, nh)",
    "ex_requests_total",  # a float series beside them: unchanged
    "rate(nh[5m])", "increase(nh[2m])", "rate(nh_float[1m])", "delta(nh_float[3m])", 'rate(nh{kind="reset"}[10m])',
    'increase(nh{kind="stale"}[7m])', "rate(nh[5m] offset 3m)",
    "sum(nh)", "sum by (kind) (nh)", "sum without (schema) (rate(nh[5m]))", "sum(nh_float)",
    "histogram_quantile(0.9, rate(nh[5m]))", "histogram_quantile(0.5, sum by (proto) (rate(nh[5m])))",
    "histogram_count(rate(nh[5m]))", "histogram_sum(increase(nh_float[5m]))",
    "histogram_fraction(0, 1, sum(rate(nh_float[5m])))", "histogram_quantile(0, rate(nh[5m]))",
    "nh_change", "rate(nh_change[5m])", "increase(nh_change[10m])", "sum by (kind) (rate(nh_change[5m]))",
    "sum(rate(nh_change[5m]))", "histogram_quantile(0.8, rate(nh_change[5m]))", "histogram_count(nh_change)",
    "count(nh)", "count by (kind) (nh)", "group(nh_float)", "count(rate(nh[5m]))", 'count({__name__=~"nh.*|ex_.*"})',
]


def _int_histogram(k: int, t: int, schema: int, base: int) -> dict:
    """A cumulative integer histogram after k scrapes (counts grow; every bucket stays present)."""
    pos = [base + k, 2 * k, k // 2, 3 * k + 1, k % 7]  # absolute counts of the 5 positive buckets
    neg = [k // 3, k + 2]
    zero = k // 4 + 1
    deltas = [pos[0]] + [b - a for a, b in zip(pos, pos[1:])]
    ndeltas = [neg[0], neg[1] - neg[0]]
    return {"count_int": sum(pos) + sum(neg) + zero, "sum": 0.25 * k * k + 3.5 * k, "schema": schema,
            "zero_threshold": 0.001, "zero_count_int": zero, "positive_spans": [(-2, 3), (2, 2)],
            "positive_deltas": deltas, "negative_spans": [(0, 2)], "negative_deltas": ndeltas,
            "timestamp": t}


def _float_histogram(k: int, t: int) -> dict:
    pos = [0.5 * k, 1.25 * k + 0.5, 0.75 * k]
    return {"count_float": sum(pos) + 0.1 * k + 0.2 * k + 0.1, "sum": 1.5 * k, "schema": 1,
            "zero_threshold": 1e-128, "zero_count_float": 0.1 * k + 0.1, "positive_spans": [(-1, 3)],
            "positive_counts": pos, "negative_spans": [(1, 1)], "negative_counts": [0.2 * k], "timestamp": t}


def _changing(k: int, t: int) -> dict[str, dict]:
    """Histograms whose layout changes on the way, so rates cross the change: a bucket that appears
    (k >= 60), a zero threshold that grows over a bucket (k >= 70), a schema reduced from 3 to 2
    (k >= 90, adjacent buckets merged as a sender reducing resolution does)."""
    a, b, c = k + 1, 2 * k + 1, 3 * k
    layout = {"schema": 0, "zero_threshold": 0.001, "zero_count_int": 1, "positive_spans": [(0, 3)],
              "positive_deltas": [a, b - a, c - b], "timestamp": t}
    layout["count_int"] = 1 + a + b + c
    if k >= 60:
        layout["positive_spans"] = [(0, 3), (2, 1)]
        layout["positive_deltas"] = [a, b - a, c - b, (k - 59) - c]
        layout["count_int"] += k - 59
    layout["sum"] = 1.5 * layout["count_int"]
    if k < 70:
        zt = {"zero_threshold": 0.001, "zero_count_int": k, "positive_spans": [(-1, 3)],
              "positive_deltas": [a, b - a, c - b]}
    else:
        zt = {"zero_threshold": 0.5, "zero_count_int": k + a, "positive_spans": [(0, 2)], "positive_deltas": [b, c - b]}
    zt |= {"schema": 0, "count_int": k + a + b + c, "sum": 0.75 * k, "timestamp": t}
    fine = [k + 1 + (i * 3) % 5 * k for i in range(8)]  # schema 3, buckets 1..8
    if k < 90:
        schema, counts = 3, fine
    else:
        schema, counts = 2, [fine[i] + fine[i + 1] for i in range(0, 8, 2)]
    reduced = {"schema": schema, "zero_threshold": 0.001, "zero_count_int": 0, "positive_spans": [(1, len(counts))],
               "positive_deltas": [counts[0]] + [y - x for x, y in zip(counts, counts[1:])],
               "count_int": sum(counts), "sum": 2.0 * k, "timestamp": t}
    return {"layout": layout, "zt": zt, "schema_change": reduced}


def series_at(k: int, t: int, proto: str) -> list[dict]:
    out = [{"labels": [("__name__", "nh"), ("kind", "int"), ("proto", proto), ("schema", "0")],
            "histograms": [_int_histogram(k, t, 0, 1)]},
           {"labels": [("__name__", "nh"), ("kind", "int"), ("proto", proto), ("schema", "3")],
            "histograms": [_int_histogram(k, t, 3, 4)]},
           {"labels": [("__name__", "nh_float"), ("kind", "float"), ("proto", proto)],
            "histograms": [_float_histogram(k, t)]}]
    reset = _int_histogram(k if k < 80 else k - 80, t, 0, 2)  # a counter reset at k == 80
    reset["reset_hint"] = 1 if k == 80 else 0
    out.append({"labels": [("__name__", "nh"), ("kind", "reset"), ("proto", proto)], "histograms": [reset]})
    if not 100 < k < 120:  # a stale marker at k == 100, then nothing for 5 minutes
        h = _int_histogram(k, t, 0, 3)
        if k == 100:
            h["sum"] = STALE_NAN
        out.append({"labels": [("__name__", "nh"), ("kind", "stale"), ("proto", proto)], "histograms": [h]})
    for kind, h in _changing(k, t).items():
        out.append({"labels": [("__name__", "nh_change"), ("kind", kind), ("proto", proto)], "histograms": [h]})
    out.append({"labels": [("__name__", "ex_requests_total"), ("job", "ex"), ("proto", proto)],
                "samples": [(t, float(10 * k))],
                "exemplars": [([("trace_id", f"{proto}-{k:04x}")], 0.5 + k % 5, t)] if k % 3 else []})
    return out


def _send(url: str, body: bytes, version: int) -> None:
    """One request, retried on 503 as Prometheus's sender retries (metricsgw's small head, below,
    refuses writes while a flush catches up)."""
    deadline = time.monotonic() + 120
    while True:
        status, text, _ = remote_write(url, body, version)
        if status == 204:
            return
        if status != 503 or time.monotonic() > deadline:
            raise RuntimeError(f"remote write {version} to {url}: {status} {text}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    work = tmp_path_factory.mktemp("native-differential")
    prom = start_prometheus(work / "prom", extra=["--enable-feature=native-histograms,exemplar-storage"])
    gw = start_metricsgw(work / "gw", extra=["--storage.flush-max-samples=200"])  # flushed every second or so
    try:
        prom.wait_ready()
        gw.wait_ready()
        end_ms = aligned_now_ms()
        start_ms = end_ms - (SCRAPES - 1) * INTERVAL_MS
        for k in range(SCRAPES):
            t = start_ms + k * INTERVAL_MS
            one = v1_request(series_at(k, t, "1"))
            _send(prom.base_url, one, 1)
            _send(gw.base_url, one, 1)
            _send(prom.base_url, v1_request(series_at(k, t, "2")), 1)
            _send(gw.base_url, v2_request(series_at(k, t, "2")), 2)
        yield gw.base_url, prom.base_url, start_ms / 1000, end_ms / 1000
    finally:
        gw.stop()
        prom.stop()


def _compare(gw_url: str, prom_url: str, path: str, params: dict) -> list[str]:
    s_want, want = api(prom_url, path, params)
    s_got, got = api(gw_url, path, params)
    where = f"{path} {params}"
    if s_want != 200:
        return [] if (s_got, got.get("errorType")) == (s_want, want.get("errorType")) else \
            [f"{where}: Prometheus {s_want} {want}, metricsgw {s_got} {got}"]
    if s_got != 200:
        return [f"{where}: Prometheus answered, metricsgw {s_got} {got}"]
    return [f"{where}: {p}" for p in diff(got["data"], want["data"])]


@pytest.mark.parametrize("query", QUERIES)
def test_query_matches_prometheus(pair, query):
    gw_url, prom_url, _, end_s = pair
    problems = []
    for dt in INSTANTS:
        problems += _compare(gw_url, prom_url, "/api/v1/query", {"query": query, "time": f"{end_s + dt:.3f}"})
    for a, b, step in RANGES:
        problems += _compare(gw_url, prom_url, "/api/v1/query_range",
                             {"query": query, "start": f"{end_s + a:.3f}", "end": f"{end_s + b:.3f}", "step": step})
    assert not problems, "\n".join(problems[:6])


def test_the_oracle_holds_histograms(pair):
    """Prometheus really stored them (else equal empty answers would prove nothing)."""
    _, prom_url, _, end_s = pair
    _, body = api(prom_url, "/api/v1/query", {"query": "nh", "time": end_s})
    kinds = {(r["metric"]["kind"], r["metric"]["proto"]) for r in body["data"]["result"] if "histogram" in r}
    assert kinds == {(k, p) for k in ("int", "reset", "stale") for p in "12"}
    marker_s = end_s - (SCRAPES - 1 - 100) * INTERVAL_MS / 1000  # the stale marker at k == 100
    _, body = api(prom_url, "/api/v1/query", {"query": 'nh{kind="stale"}', "time": marker_s + 60})
    assert body["data"]["result"] == []  # the marker hides the series
    _, body = api(prom_url, "/api/v1/query", {"query": 'nh{kind="stale"}', "time": marker_s - 1})
    assert len(body["data"]["result"]) == 2
    after_changes_s = end_s - (SCRAPES - 1 - 92) * INTERVAL_MS / 1000  # windows that cross all three changes
    for query, n, t in (("rate(nh[5m])", 8, end_s), ("sum by (kind) (nh)", 3, end_s),
                        ("histogram_quantile(0.9, rate(nh[5m]))", 8, end_s), ("rate(nh_change[10m])", 6, after_changes_s)):
        _, body = api(prom_url, "/api/v1/query", {"query": query, "time": t})
        assert len(body["data"]["result"]) == n, query
        if not query.startswith("histogram_"):
            assert all(len(r["histogram"][1]["buckets"]) >= 2 for r in body["data"]["result"]), query


def _status_and_body(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_exemplars_of_a_query_without_selectors(pair):
    gw_url, prom_url, _, _ = pair
    path = "/api/v1/query_exemplars?query=1%2B1"
    assert _status_and_body(gw_url + path) == _status_and_body(prom_url + path) == (204, b"")


@pytest.mark.parametrize("query", ["ex_requests_total", 'rate(ex_requests_total{proto="2"}[5m])', '{job="ex"}',
                                   'ex_requests_total{proto="1"} + nh'])
def test_exemplars_match_prometheus(pair, query):
    gw_url, prom_url, start_s, end_s = pair
    for start, end in ((start_s, end_s), (end_s - 600, end_s - 300), (end_s + 10, end_s + 20)):
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        s_want, want = api(prom_url, "/api/v1/query_exemplars", params)
        s_got, got = api(gw_url, "/api/v1/query_exemplars", params)
        assert (s_got, got) == (s_want, want), f"{params}"
    assert want["data"] == []  # the last window holds none


def test_exemplars_reach_the_oracle(pair):
    _, prom_url, start_s, end_s = pair
    _, body = api(prom_url, "/api/v1/query_exemplars", {"query": "ex_requests_total", "start": start_s, "end": end_s})
    assert [len(s["exemplars"]) for s in body["data"]] == [107, 107]  # every k not divisible by 3, per proto
    assert math.isclose(float(body["data"][0]["exemplars"][0]["value"]), 1.5)
