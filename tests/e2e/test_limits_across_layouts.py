"""A user's limits judge the user's query once, where it is evaluated, whatever process reads the data (issue 29).

The default layout (a front, two ingest shards, a query process reading the shards' heads) and a one-process
gateway get the same writes, nothing flushed, and small limits on everything a user can limit: samples, series,
metadata results, label values, remote read's sample and concurrency limits. Every call of the issue's cases
must answer in both exactly alike: status, errorType, warnings and data. Before, the shards refused their own
head reads with these limits and the default layout answered 200 with empty or wrong data and a warning.
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write

LIMITS = ["--query.max-samples=1000", "--query.max-series=30", "--query.max-metadata-series=5",
          "--query.max-label-values=3", "--storage.remote.read-sample-limit=100",
          "--storage.remote.read-concurrent-limit=1"]
UNFLUSHED = ["--storage.flush-interval=1h", "--storage.flush-max-samples=100000000"]
LAYOUTS = {"default": ["--ingest.shards=2", "--query.processes=1"], "single": ["--server.single-process"]}


def _series(name: str, count: int, samples: int, interval_ms: int, end_ms: int, **labels) -> list:
    return [([("__name__", name), ("i", str(i)), *labels.items()],
             [(end_ms - (samples - 1 - k) * interval_ms, float(i + k)) for k in range(samples)]) for i in range(count)]


@pytest.fixture(scope="module")
def gateways(tmp_path_factory):
    work = tmp_path_factory.mktemp("limits-across-layouts")
    gws = {name: start_metricsgw(work / name, extra=[*flags, *LIMITS, *UNFLUSHED]) for name, flags in LAYOUTS.items()}
    try:
        for gw in gws.values():
            gw.wait_ready()
        end_ms = (int(time.time()) - 5) * 1000
        data = (_series("k15", 20, 90, 15_000, end_ms)  # 1,800 samples at 15 s over 22 minutes
                + _series("m3", 15, 100, 18_000, end_ms)  # spread over both shards
                + _series("ms", 25, 1, 15_000, end_ms)  # 25 series: under --query.max-series, over the metadata cap
                + _series("fine", 3, 300, 1_000, end_ms)  # 1 s data: the scrape interval the estimate must learn
                + _series("iv60", 3, 30, 60_000, end_ms))  # 60 s data
        for gw in gws.values():
            for part in range(0, len(data), 20):
                status, text, _ = remote_write(gw.base_url, encode_v1(data[part:part + 20]))
                assert status == 204, text
        yield {name: gw.base_url for name, gw in gws.items()}, end_ms / 1000
    finally:
        for gw in gws.values():
            gw.stop()


CALLS = [
    ("/api/v1/query", {"query": "sum(count_over_time(k15[30m]))"}),
    ("/api/v1/query", {"query": "count(count_over_time(m3[30m]))"}),
    ("/api/v1/query", {"query": "sum(count_over_time(m3[30m]))"}),
    ("/api/v1/query", {"query": "count(ms)"}),
    ("/api/v1/query", {"query": "count(k15)"}),
    ("/api/v1/query", {"query": "k15[5m]"}),
    ("/api/v1/query", {"query": "m3[30m]"}),
    ("/api/v1/query", {"query": "sum(count_over_time(fine[5m]))"}),
    ("/api/v1/query", {"query": "sum(count_over_time(iv60[30m]))"}),
    ("/api/v1/query", {"query": 'count({__name__=~".+"})'}),
    ("/api/v1/query_range", {"query": "sum(rate(k15[5m]))", "start": -1200, "end": 0, "step": 60}),
    ("/api/v1/query_range", {"query": "sum(m3)", "start": -1200, "end": 0, "step": 60}),
    ("/api/v1/series", {"match[]": "ms"}),
    ("/api/v1/series", {"match[]": "m3"}),
    ("/api/v1/series", {"match[]": "ms", "limit": "2"}),
    ("/api/v1/labels", {}),
    ("/api/v1/labels", {"match[]": "ms"}),
    ("/api/v1/label/__name__/values", {}),
    ("/api/v1/label/i/values", {"match[]": "m3"}),
    ("/api/v1/query_exemplars", {"query": "ms", "start": -600, "end": 0}),
]


def _at(params: dict, end_s: float) -> dict:
    """Times given relative to the data's end made absolute; an instant query at the end."""
    out = {k: (f"{end_s + v:.3f}" if k in ("start", "end") else v) for k, v in params.items()}
    if "start" not in out and "query" in out and "exemplars" not in out:
        out["time"] = f"{end_s:.3f}"
    return out


@pytest.mark.parametrize("path, params", CALLS, ids=[f"{p} {q}" for p, q in CALLS])
def test_the_default_layout_answers_as_one_process(gateways, path, params):
    urls, end_s = gateways
    asked = _at(params, end_s)
    (s_got, got), (s_want, want) = api(urls["default"], path, asked), api(urls["single"], path, asked)
    assert s_got == s_want, (path, asked, got, want)
    assert got.get("errorType") == want.get("errorType") and got.get("warnings") == want.get("warnings"), (got, want)
    assert got.get("data") == want.get("data"), (path, asked)
    assert "did not answer" not in str(got)


def test_the_answers_are_not_all_refusals(gateways):
    """The comparison above proves something: the cases of the issue answer, with their data."""
    urls, end_s = gateways
    for query, value in (("sum(count_over_time(k15[30m]))", "1800"), ("count(count_over_time(m3[30m]))", "15"),
                         ("sum(count_over_time(m3[30m]))", "1500"), ("count(ms)", "25")):
        status, body = api(urls["default"], "/api/v1/query", {"query": query, "time": f"{end_s:.3f}"})
        assert status == 200 and body["data"]["result"][0]["value"][1] == value, (query, body)
    status, body = api(urls["default"], "/api/v1/query_range",
                       _at({"query": "sum(rate(k15[5m]))", "start": -1200, "end": 0, "step": 60}, end_s))
    assert status == 200 and len(body["data"]["result"][0]["values"]) == 21, body


def test_remote_read_limits_never_empty_a_query(gateways):
    """--storage.remote.read-concurrent-limit=1 and --storage.remote.read-sample-limit=100 are remote read's: many
    queries at once, each reading more than 100 samples of the shards' heads, all answer in full."""
    urls, end_s = gateways
    params = {"query": "sum(count_over_time(k15[30m]))", "time": f"{end_s:.3f}"}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: api(urls["default"], "/api/v1/query", params), range(24)))
    for status, body in answers:
        assert status == 200 and "warnings" not in body and body["data"]["result"][0]["value"][1] == "1800", body
