"""Differential test for native histograms and exemplars: real Prometheus 2.42 (native-histograms and
exemplar-storage enabled) and metricsgw fed the same remote-write requests, asked the same queries, in the
process layouts of the conformance suite (tests/conformance/layouts.py): one process, and a front with two
ingest shards and a query process.

40 minutes at 15 s of: integer histograms (schemas 0 and 3, zero and negative buckets, a counter
reset, a stale marker and a gap), a float histogram (schema 1), and a float counter with exemplars.
2.42 predates remote write 2.0, so the ``proto="2"`` copies of the same histograms and exemplars
reach metricsgw by 2.0 and Prometheus by 1.0: equal answers show both decoders store the same.
metricsgw flushes to Parquet several times meanwhile, so answers come from files and head merged.

Where 2.42 answers wrongly (it keeps a histogram unchanged by ``* 2`` or unary minus, answers ``avg``,
``h - h`` and sum/avg/last_over_time as the float 0), metricsgw answers as Prometheus 3 does; those are checked against 2.42
queries that must give the same answer (PAIRS). What metricsgw does not evaluate over histograms is
refused with 400 bad_data (REFUSED), never answered empty.
"""

from __future__ import annotations

import math
import struct
import time
import urllib.error
import urllib.request

import pytest

from metricsgw.model import STALE_NAN, STALE_NAN_BITS
from metricsgw.remote import histogram_chunks
from metricsgw.remote.proto import remote_read_pb2 as rpb
from metricsgw.remote.proto import remote_v1_pb2 as v1pb
from testkit.procs import start_metricsgw, start_prometheus
from tests.conformance.layouts import FLAGS
from tests.dashboards.loading import INTERVAL_MS, aligned_now_ms
from tests.e2e.client import api, remote_write
from tests.e2e.compare import diff
from tests.native_requests import v1_request, v2_request
from tests.remote import histogram_chunk_reference
from tests.remote.histogram_chunk_reference import absolute_buckets, from_bits
from tests.remote.read_client import (build_request, decode_samples_histograms, decode_streamed,
                                      decode_streamed_histograms, post)

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
    # range selectors, the *_over_time functions 2.42 defines on histograms, absent, timestamp
    "nh[1m]", "nh_float[2m]", '{__name__=~"nh.*|ex_.*"}[1m]', 'nh{kind="stale"}[5m] offset 20m',
    "count_over_time(nh[5m])", "present_over_time(nh_float[3m])", 'count_over_time({__name__=~"nh.*|ex_.*"}[2m])',
    "absent(nh)", 'absent(nh{kind="none"})', "absent_over_time(nh[5m])", 'absent_over_time(nh{kind="stale"}[1m])',
    "timestamp(nh)", "timestamp(rate(nh_float[5m]))",
    # histogram + histogram, and the set operators
    "nh + nh", "rate(nh[5m]) + rate(nh[5m])", "sum(nh) + sum(nh)", "sum by (kind) (nh_change) + sum by (kind) (nh_change)",
    'nh + ignoring(schema) group_left nh{kind="int",schema="0"}', "nh_change + nh_change",
    "histogram_count(sum(rate(nh[5m])) + sum(rate(nh[5m])))", "histogram_quantile(0.9, rate(nh[5m]) + rate(nh[5m]))",
    "nh and nh", 'nh unless nh{kind="int"}', "nh or ex_requests_total", "ex_requests_total and nh",
    "ex_requests_total or on(proto) nh", "nh or on(proto) ex_requests_total", 'nh_float or on(kind) nh{kind="int"}',
    "nh + ex_requests_total",  # no match between them: empty in both
    # subqueries
    "nh[5m:1m]", "rate(nh[5m:1m])", "increase(nh_float[10m:30s])", "rate(sum(nh)[5m:1m])", "count_over_time(nh[5m:1m])",
    "histogram_quantile(0.9, rate(nh_change[10m:1m]))", "delta(nh_float[5m:1m] offset 2m)",
    "nh_change", "rate(nh_change[5m])", "increase(nh_change[10m])", "sum by (kind) (rate(nh_change[5m]))",
    "sum(rate(nh_change[5m]))", "histogram_quantile(0.8, rate(nh_change[5m]))", "histogram_count(nh_change)",
    "count(nh)", "count by (kind) (nh)", "group(nh_float)", "count(rate(nh[5m]))", 'count({__name__=~"nh.*|ex_.*"})',
]


# metricsgw's query (Prometheus 3's answer) -> a 2.42 query with the same answer
PAIRS = [
    ("rate(nh[5m]) * 2", "rate(nh[5m]) + rate(nh[5m])"),  # x * 2 == x + x, bit for bit
    ("2 * sum by (kind) (rate(nh[5m]))", "sum by (kind) (rate(nh[5m])) + sum by (kind) (rate(nh[5m]))"),
    ("histogram_count(rate(nh[5m]) / 60)", "histogram_count(rate(nh[5m])) / 60"),
    ("histogram_sum(rate(nh[5m]) / 60)", "histogram_sum(rate(nh[5m])) / 60"),
    ("histogram_count(increase(nh_float[5m]) * 0.5)", "histogram_count(increase(nh_float[5m])) * 0.5"),
    ("histogram_quantile(0.9, rate(nh[5m]) * 3)", "histogram_quantile(0.9, rate(nh[5m]) + rate(nh[5m]) + rate(nh[5m]))"),
    ("histogram_count(avg(nh))", "histogram_count(sum(nh)) / count(nh)"),
    ("histogram_sum(avg by (kind) (rate(nh[5m])))", "histogram_sum(sum by (kind) (rate(nh[5m]))) / count by (kind) (rate(nh[5m]))"),
    ("histogram_count(nh - nh)", "histogram_count(nh) - histogram_count(nh)"),
    ("histogram_sum(-nh_float)", "-histogram_sum(nh_float)"),
    # samples every 15 s on the 15 s grid: a 15 s subquery sees each window's samples (while there are samples:
    # after the last one, its steps would see it again by the lookback; see WITHIN_DATA)
    ('histogram_count(sum_over_time(nh{kind="int"}[1m]))', 'sum_over_time(histogram_count(nh{kind="int"})[1m:15s])'),
    ("histogram_sum(avg_over_time(nh_float[2m]))", "avg_over_time(histogram_sum(nh_float)[2m:15s])"),
    ("histogram_count(-rate(nh[5m]))", "-histogram_count(rate(nh[5m]))"),
    ("histogram_sum(nh_change - nh_change offset 5m)", "histogram_sum(nh_change) - histogram_sum(nh_change offset 5m)"),
    ('last_over_time(nh{kind!="stale"}[5m])', 'nh{kind!="stale"}'),
    ("histogram_count(last_over_time(nh_float[5m]))", "histogram_count(nh_float)"),
]
WITHIN_DATA = {ours for ours, theirs in PAIRS if "[1m:15s]" in theirs or "[2m:15s]" in theirs}
# What meets a histogram and is not evaluated here: 400 bad_data, where 2.42 answers (often wrongly).
REFUSED = ["max_over_time(nh[5m])", "stddev_over_time(nh_float[5m])", "changes(nh[5m])", "abs(nh)", "nh > 0",
           "nh > bool 0", "nh * nh", "nh / nh", "max(nh)", "topk(1, nh)", "quantile(0.5, rate(nh[5m]))",
           'count_values("x", nh)', "max_over_time(nh[10m:1m])", 'label_replace(nh, "a", "b", "", "")',
           "sort(nh)", "scalar(sum(nh))", "nh + on(proto) group_left ex_requests_total", "1 - nh", "nh - 1",
           "count(abs(nh))", "histogram_quantile(scalar(nh), nh)", "irate(nh[5m])", "deriv(nh_float[5m])"]


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
def window():
    end_ms = aligned_now_ms()
    return end_ms - (SCRAPES - 1) * INTERVAL_MS, end_ms


def _load(url: str, start_ms: int, v2: bool) -> None:
    """Every scrape: proto="1" by remote write 1.0; proto="2" by 2.0 (``v2``, metricsgw) or 1.0."""
    for k in range(SCRAPES):
        t = start_ms + k * INTERVAL_MS
        _send(url, v1_request(series_at(k, t, "1")), 1)
        if v2:
            _send(url, v2_request(series_at(k, t, "2")), 2)
        else:
            _send(url, v1_request(series_at(k, t, "2")), 1)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, window):
    prom = start_prometheus(tmp_path_factory.mktemp("native-prometheus"),
                            extra=["--enable-feature=native-histograms,exemplar-storage"])
    try:
        prom.wait_ready()
        _load(prom.base_url, window[0], v2=False)
        yield prom.base_url
    finally:
        prom.stop()


@pytest.fixture(scope="module", params=["single", "default"])
def pair(request, tmp_path_factory, prometheus, window):
    # flushed every second or so: answers come from files and heads merged
    gw = start_metricsgw(tmp_path_factory.mktemp(f"native-{request.param}"),
                         extra=[*FLAGS[request.param], "--storage.flush-max-samples=200", "--query.promql-compat=2"])
    try:
        gw.wait_ready()
        _load(gw.base_url, window[0], v2=True)
        yield gw.base_url, prometheus, window[0] / 1000, window[1] / 1000
    finally:
        gw.stop()


def _compare(gw_url: str, prom_url: str, path: str, params: dict, theirs: str | None = None) -> list[str]:
    """metricsgw's answer to ``params`` against Prometheus's (to ``theirs`` as the query, when given)."""
    s_want, want = api(prom_url, path, params if theirs is None else {**params, "query": theirs})
    s_got, got = api(gw_url, path, params)
    where = f"{path} {params}"
    if s_want != 200:
        return [] if (s_got, got.get("errorType")) == (s_want, want.get("errorType")) else \
            [f"{where}: Prometheus {s_want} {want}, metricsgw {s_got} {got}"]
    if s_got != 200:
        return [f"{where}: Prometheus answered, metricsgw {s_got} {got}"]
    return [f"{where}: {p}" for p in diff(got["data"], want["data"])]


def _calls(query: str, end_s: float):
    for dt in INSTANTS:
        yield "/api/v1/query", {"query": query, "time": f"{end_s + dt:.3f}"}
    for a, b, step in RANGES:
        yield "/api/v1/query_range", {"query": query, "start": f"{end_s + a:.3f}", "end": f"{end_s + b:.3f}", "step": step}


@pytest.mark.parametrize("query", QUERIES)
def test_query_matches_prometheus(pair, query):
    gw_url, prom_url, _, end_s = pair
    problems = []
    for path, params in _calls(query, end_s):
        problems += _compare(gw_url, prom_url, path, params)
    assert not problems, "\n".join(problems[:6])


@pytest.mark.parametrize("ours,theirs", PAIRS)
def test_where_2_42_is_wrong_the_answer_is_prometheus_3s(pair, ours, theirs):
    gw_url, prom_url, _, end_s = pair
    problems = []
    for path, params in _calls(ours, end_s):
        if ours in WITHIN_DATA and float(params.get("time", params.get("end", 0))) > end_s:
            continue
        problems += _compare(gw_url, prom_url, path, params, theirs)
    assert not problems, "\n".join(problems[:6])


def test_the_pairs_hold_histograms(pair):
    """The queries PAIRS compare answer something (equal empty answers would prove nothing)."""
    gw_url, _, _, end_s = pair
    for ours, _ in PAIRS:
        _, body = api(gw_url, "/api/v1/query", {"query": ours, "time": f"{end_s:.3f}"})
        assert body["data"]["result"], ours


@pytest.mark.parametrize("query", REFUSED)
def test_what_is_not_evaluated_over_histograms_is_refused(pair, query):
    gw_url, prom_url, _, end_s = pair
    for path, params in _calls(query, end_s):
        if float(params.get("time", 0)) > end_s:
            continue  # no histogram is selected there: nothing to refuse
        status, body = api(gw_url, path, params)
        assert (status, body.get("errorType")) == (400, "bad_data"), (params, status, body)
        assert "native histograms" in body["error"], body
    status, _ = api(prom_url, "/api/v1/query", {"query": query, "time": f"{end_s:.3f}"})
    assert status == 200  # 2.42 answers it (wrongly, or dropping the histograms)


def test_float_queries_are_not_refused(pair):
    """The refusals are for histograms only: the same shapes over the float counter answer as 2.42 does."""
    gw_url, prom_url, _, end_s = pair
    problems = []
    for query in ("sum_over_time(ex_requests_total[5m])", "-ex_requests_total", "ex_requests_total > 100",
                  "rate(ex_requests_total[5m:1m])", "max(ex_requests_total)", "abs(ex_requests_total) * 2"):
        for path, params in _calls(query, end_s):
            problems += _compare(gw_url, prom_url, path, params)
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


# ---------------------------------------------------------------- remote read


def _remote_read(url: str, rtype: int, start_s: float, end_s: float) -> bytes:
    query = {"matchers": [("__name__", "=~", "nh.*")], "start": int(start_s * 1000) - 1, "end": int(end_s * 1000) + 1}
    status, _, raw = post(url + "/api/v1/read", build_request([query], [rtype]))
    assert status == 200, raw[:300]
    return raw


def _from_chunk(s: dict, is_float: bool) -> tuple:
    f = from_bits if is_float else float
    if s["sum_bits"] == STALE_NAN_BITS:
        return s["t"], s["sum_bits"]
    return (s["t"], s["sum_bits"], s["schema"], s["zero_threshold"], f(s["count"]), f(s["zero_count"]),
            absolute_buckets(s["pos_spans"], s["pos"], not is_float),
            absolute_buckets(s["neg_spans"], s["neg"], not is_float), s["custom_values"])


def _from_message(h) -> tuple:
    sum_bits = struct.unpack("<Q", struct.pack("<d", h.sum))[0]
    if sum_bits == STALE_NAN_BITS:
        return h.timestamp, sum_bits
    is_float = h.WhichOneof("count") == "count_float"
    spans = [[(s.offset, s.length) for s in ss] for ss in (h.positive_spans, h.negative_spans)]
    pos, neg = (h.positive_counts, h.negative_counts) if is_float else (h.positive_deltas, h.negative_deltas)
    return (h.timestamp, sum_bits, h.schema, h.zero_threshold,
            float(h.count_float if is_float else h.count_int),
            float(h.zero_count_float if is_float else h.zero_count_int),
            absolute_buckets(spans[0], pos, not is_float), absolute_buckets(spans[1], neg, not is_float),
            tuple(h.custom_values))


def _streamed_histograms(url: str, start_s: float, end_s: float,
                         open_chunk_unknown: bool = True) -> tuple[dict, dict, dict]:
    """(labels -> histograms, (labels, t) -> counter reset header of each chunk, [(encoding, bytes)] of every
    histogram chunk) of a streamed read of the nh* series. With ``open_chunk_unknown`` (Prometheus 2.42) a
    series' last chunk is left out of the headers: 2.42 streams its head's open chunk re-encoded, with the
    header "unknown" whatever the chunk's own header says. metricsgw streams every chunk's own header, its
    last included: the last chunk of one need not be the last of the other (2.42 also cuts a chunk at the
    2-hour boundary, so its chunk cut by a reset shortly before is not its last when metricsgw's is)."""
    raw = _remote_read(url, rpb.ReadRequest.STREAMED_XOR_CHUNKS, start_s, end_s)
    series, headers, chunks = {}, {}, []
    for labels, samples in decode_streamed_histograms(raw, 1)[0].items():
        series[labels] = [_from_chunk(s, dict(labels)["__name__"] == "nh_float") for _, s in samples]
        starts = [(labels, s["t"], header) for header, s in samples if header is not None]
        headers.update({(labels, t): header for labels, t, header in (starts[:-1] if open_chunk_unknown else starts)})
    for f in decode_streamed(raw, 1)[1]:
        chunks += [(enc, data) for _, _, data, enc in f["chunks"] if enc != rpb.Chunk.XOR]
    return series, headers, chunks


def _as_sent(s: dict, is_float: bool, header: int) -> bytes:
    """A decoded chunk sample as the remote-write histogram that would make it (the chunk's first sample
    carries the reset hint that makes its header, where a hint can)."""
    h = v1pb.Histogram(sum=from_bits(s["sum_bits"]), schema=s["schema"],
                       zero_threshold=s["zero_threshold"], timestamp=s["t"], custom_values=s["custom_values"],
                       reset_hint={histogram_chunk_reference.COUNTER_RESET: 1,
                                   histogram_chunk_reference.GAUGE_TYPE: 3}.get(header, 0))
    for field, spans in (("positive_spans", s["pos_spans"]), ("negative_spans", s["neg_spans"])):
        getattr(h, field).extend(v1pb.BucketSpan(offset=o, length=n) for o, n in spans)
    if is_float:
        f = from_bits
        h.count_float, h.zero_count_float = f(s["count"]), f(s["zero_count"])
        h.positive_counts.extend(s["pos"])
        h.negative_counts.extend(s["neg"])
    else:
        h.count_int, h.zero_count_int = s["count"], s["zero_count"]
        h.positive_deltas.extend(s["pos"])
        h.negative_deltas.extend(s["neg"])
    return h.SerializeToString()


def test_remote_read_streams_the_histogram_chunks_prometheus_streams(pair):
    """STREAMED_XOR_CHUNKS carries native histograms as Prometheus 2.42 streams them: the same histograms
    (every layout change, counter resets, the stale marker, the float histogram), chunks cut where Prometheus
    cuts them for a counter reset with the same header, and every chunk Prometheus sends re-encoded byte for
    byte by metricsgw/remote/histogram_chunks.py (given its samples: Prometheus's head cuts chunks by time)."""
    gw_url, prom_url, start_s, end_s = pair
    want, their_headers, their_chunks = _streamed_histograms(prom_url, start_s, end_s)
    got, our_headers, our_chunks = _streamed_histograms(gw_url, start_s, end_s, open_chunk_unknown=False)
    assert len(want) == 16 and sum(map(len, want.values())) > 16 * 140  # every nh* series, whole
    assert got == want
    resets = {key for key, header in their_headers.items() if header == histogram_chunk_reference.COUNTER_RESET}
    assert len(resets) > 8 * 15  # every 7 scrapes a bucket of the 8 nh series goes down: a counter reset
    assert {key: our_headers.get(key) for key in resets} == {key: their_headers[key] for key in resets}
    assert {enc for enc, _ in their_chunks} == {rpb.Chunk.HISTOGRAM, rpb.Chunk.FLOAT_HISTOGRAM}
    for enc, data in their_chunks:
        header, samples = histogram_chunk_reference.decode(data, enc)
        is_float = enc == rpb.Chunk.FLOAT_HISTOGRAM
        ours = histogram_chunks.chunks([s["t"] for s in samples], [_as_sent(s, is_float, header if k == 0 else 0)
                                                                   for k, s in enumerate(samples)], per_chunk=1000)
        assert len(ours) == 1, f"one chunk of Prometheus's became {len(ours)}"
        assert (ours[0][2], ours[0][3][:2] + ours[0][3][3:]) == (enc, data[:2] + data[3:])


def test_remote_read_samples_carry_the_histograms(pair):
    """SAMPLES answers native histograms in each series' ``histograms``, as Prometheus 3 does (2.42 leaves
    them out): the same histograms Prometheus streams."""
    gw_url, prom_url, start_s, end_s = pair
    want = _streamed_histograms(prom_url, start_s, end_s)[0]
    raw = _remote_read(gw_url, rpb.ReadRequest.SAMPLES, start_s, end_s)
    got = {labels: [_from_message(h) for h in hs] for labels, hs in decode_samples_histograms(raw)[0].items()}
    assert got == want
