"""Sample and series budgets on heavy queries: refused with 422 execution naming the flag, and
counted once (a query under the budget runs)."""

from __future__ import annotations

import pytest

from tests.guard.conftest import server_fixture
from tests.guard.helpers import metric, timed_api

MAX_SERIES = 40_000
MAX_SAMPLES = 30_000

# --query.max-samples counts as Prometheus 2.42 counts (promql/held.py): points held at once by the
# evaluation, not raw samples read (their memory is --query.max-memory-per-query's).

server = server_fixture([f"--query.max-series={MAX_SERIES}", f"--query.max-samples={MAX_SAMPLES}"])

# apiserver buckets: 7,560 series, a point each at an instant (under both budgets);
# node_cpu_seconds_total: 33,472 series (under MAX_SERIES), a point each at every step (over MAX_SAMPLES).


def _range(loaded, query: str) -> dict:
    return {"query": query, "start": loaded.start_ms / 1000 - 600, "end": loaded.end_s, "step": "15"}


def test_too_many_series_is_422_naming_the_flag(server, loaded):
    before = metric(server.base_url, "metricsgw_guard_rejections_total", limit="query.max-series")
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, 'count({__name__=~".+"})'), method="POST")
    assert status == 422, body
    assert body["errorType"] == "execution"
    assert "--query.max-series" in body["error"] and str(MAX_SERIES) in body["error"]
    assert metric(server.base_url, "metricsgw_guard_rejections_total", limit="query.max-series") == before + 1


def test_heavy_histogram_query_over_the_sample_budget_is_422(server, loaded):
    """rate() over 13,608 bucket series: its output points, held for every series before the sum, are over 30,000."""
    before = metric(server.base_url, "metricsgw_guard_rejections_total", limit="query.max-samples")
    q = 'sum by (le) (rate({__name__=~"(apiserver|etcd)_request_duration_seconds_bucket"}[5m]))'
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range", _range(loaded, q), method="POST")
    assert status == 422, body
    assert body["errorType"] == "execution"
    assert "--query.max-samples" in body["error"] and str(MAX_SAMPLES) in body["error"], body["error"]
    assert metric(server.base_url, "metricsgw_guard_rejections_total", limit="query.max-samples") == before + 1


def test_too_many_samples_is_422_naming_the_flag(server, loaded):
    """rate()'s output for 33k series, held at once: over the budget."""
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, "rate(node_cpu_seconds_total[5m])"), method="POST")
    assert status == 422, body
    assert body["errorType"] == "execution"
    # 33k series are within --query.max-series: the samples are what is over
    assert body["error"].startswith("query processing would load too many samples into memory in query execution")
    assert "--query.max-samples" in body["error"] and str(MAX_SAMPLES) in body["error"], body["error"]


def test_aggregation_of_the_same_series_is_422_as_in_prometheus(server, loaded):
    """Summed by mode, the same 33k series still pass through rate(), whose output Prometheus holds for every
    series before the sum: over --query.max-samples, so 2.42 refuses it too. (Series batches bound the memory
    the gateway holds, promql/batching.py, not what the flag counts.)"""
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, "sum by (mode) (rate(node_cpu_seconds_total[5m]))"), method="POST")
    assert status == 422, body
    assert body["errorType"] == "execution"
    assert "--query.max-samples" in body["error"] and str(MAX_SAMPLES) in body["error"], body["error"]


def test_query_within_budgets_runs(server, loaded):
    """Each series counts once, each point found once: 7,560 + the count's own point < 30,000."""
    status, body, _ = timed_api(server.base_url, "/api/v1/query",
                                {"query": "count(apiserver_request_duration_seconds_bucket)", "time": loaded.end_s})
    assert status == 200, body
    assert body["data"]["result"][0]["value"][1] == "7560"


def test_heavy_histogram_range_query_within_budgets(server, loaded):
    status, body, _ = timed_api(server.base_url, "/api/v1/query_range",
                                _range(loaded, "sum by (le) (rate(apiserver_request_duration_seconds_bucket[5m]))"),
                                method="POST")
    assert status == 200, body
    les = {s["metric"]["le"] for s in body["data"]["result"]}
    assert "+Inf" in les and len(les) > 5
