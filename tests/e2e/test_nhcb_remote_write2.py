"""The seed's kube-apiserver latency histogram as Prometheus 3 sends it with
``convert_classic_histograms_to_nhcb``: one custom-bucket native histogram (schema -53) per series over remote
write 2.0, instead of a float series per ``le`` bucket. A real gateway gets both forms of the same
observations; each PromQL question asked of the classic form and of the native form gets the same answer, and
the native form is one series where the classic one is fourteen."""

from __future__ import annotations

import math
import time

import pytest

from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.native_requests import v1_request, v2_request

BOUNDS = [0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 4.0]  # then +Inf
VERBS = ["GET", "LIST", "WATCH", "PATCH"]
SCRAPES = 40
STEP_MS = 15_000


def _counts(verb: int, k: int) -> list[int]:
    """Scrape k's observations per bucket (not cumulative), growing like a latency histogram."""
    return [(k + 1) * (1 + (b * 5 + verb * 3) % 11) for b in range(len(BOUNDS) + 1)]


def _requests(start_ms: int) -> tuple[list[bytes], list[bytes]]:
    classic, native = [], []
    for k in range(SCRAPES):
        t = start_ms + k * STEP_MS
        c_series, n_series = [], []
        for v, verb in enumerate(VERBS):
            counts = _counts(v, k)
            total, s = sum(counts), 0.01 * sum(c * (b + 1) for b, c in enumerate(counts))
            base = [("__name__", "apiserver_request_duration_seconds"), ("verb", verb)]
            cumulative = 0
            for bound, c in zip(BOUNDS + [math.inf], counts):
                cumulative += c
                le = "+Inf" if bound == math.inf else repr(bound)
                c_series.append({"labels": [("__name__", "apiserver_request_duration_seconds_bucket"), ("le", le),
                                            ("verb", verb)], "samples": [(t, float(cumulative))]})
            c_series.append({"labels": [("__name__", "apiserver_request_duration_seconds_count"), ("verb", verb)],
                             "samples": [(t, float(total))]})
            c_series.append({"labels": [("__name__", "apiserver_request_duration_seconds_sum"), ("verb", verb)],
                             "samples": [(t, s)]})
            deltas = [counts[0]] + [b - a for a, b in zip(counts, counts[1:])]
            n_series.append({"labels": base, "histograms": [{
                "schema": -53, "count_int": total, "sum": s, "timestamp": t, "custom_values": BOUNDS,
                "positive_spans": [(0, len(counts))], "positive_deltas": deltas}]})
        classic.append(v1_request(c_series))
        native.append(v2_request(n_series))
    return classic, native


QUESTIONS = [
    ("histogram_quantile(0.99, sum by (verb, le) (rate(apiserver_request_duration_seconds_bucket[2m])))",
     "histogram_quantile(0.99, sum by (verb) (rate(apiserver_request_duration_seconds[2m])))"),
    ("histogram_quantile(0.5, sum by (le) (rate(apiserver_request_duration_seconds_bucket[2m])))",
     "histogram_quantile(0.5, sum(rate(apiserver_request_duration_seconds[2m])))"),
    ("sum by (verb) (rate(apiserver_request_duration_seconds_count[2m]))",
     "histogram_count(sum by (verb) (rate(apiserver_request_duration_seconds[2m])))"),
    ("sum by (verb) (rate(apiserver_request_duration_seconds_sum[2m]))",
     "histogram_sum(sum by (verb) (rate(apiserver_request_duration_seconds[2m])))"),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    server = start_metricsgw(tmp_path_factory.mktemp("nhcb"))
    try:
        server.wait_ready()
        start_ms = (int(time.time()) - 3600) // 60 * 60 * 1000
        classic, native = _requests(start_ms)
        for c, n in zip(classic, native):
            assert remote_write(server.base_url, c, version=1)[0] == 204
            status, body, _ = remote_write(server.base_url, n, version=2)
            assert status == 204, body
        yield server, start_ms
    finally:
        server.stop()


def _range(server, query: str, start_ms: int) -> dict:
    status, body = api(server.base_url, "/api/v1/query_range", {
        "query": query, "start": (start_ms + 5 * 60_000) / 1000, "end": (start_ms + (SCRAPES - 1) * STEP_MS) / 1000,
        "step": "30s"})
    assert status == 200, body
    return {tuple(sorted(r["metric"].items())): [(t, float(v)) for t, v in r["values"]] for r in body["data"]["result"]}


@pytest.mark.parametrize("classic, native", QUESTIONS)
def test_the_native_form_answers_as_the_classic_form(gateway, classic, native):
    server, start_ms = gateway
    want, got = _range(server, classic, start_ms), _range(server, native, start_ms)
    assert want and set(got) == set(want)
    for key, points in want.items():
        assert [t for t, _ in got[key]] == [t for t, _ in points]
        for (_, a), (_, b) in zip(points, got[key]):
            assert math.isclose(a, b, rel_tol=1e-9), (key, a, b)


def test_the_native_form_is_one_series_where_the_classic_is_one_per_bucket(gateway):
    server, start_ms = gateway
    t = (start_ms + (SCRAPES - 1) * STEP_MS) / 1000
    _, classic = api(server.base_url, "/api/v1/series", {"match[]": "apiserver_request_duration_seconds_bucket",
                                                          "start": t - 600, "end": t})
    _, native = api(server.base_url, "/api/v1/series", {"match[]": "apiserver_request_duration_seconds",
                                                         "start": t - 600, "end": t})
    assert len(classic["data"]) == len(VERBS) * (len(BOUNDS) + 1)
    assert len(native["data"]) == len(VERBS)
    _, answer = api(server.base_url, "/api/v1/query", {"query": 'apiserver_request_duration_seconds{verb="GET"}',
                                                       "time": t})
    (sample,) = answer["data"]["result"]
    h = sample["histogram"][1]
    assert h["count"] == str(sum(_counts(0, SCRAPES - 1)))
    assert [b[2] for b in h["buckets"]][-1] == "+Inf"  # the +Inf bucket: custom bounds come back as sent
