"""The calls that took real deployments down, against ~200k series: each must answer 200 within the
metadata deadline, with a bounded result (server cap or ``limit``), a warning when truncated, and
bounded server memory. Also the request ``timeout`` and blocked queries.
"""

from __future__ import annotations

import time

import pytest

from tests.guard.conftest import server_fixture
from tests.guard.helpers import MiB, metric, rss_of, timed_api

SERIES_CAP = 10_000  # below the 13.6k `le` series, so the Grafana call is truncated by the server
VALUES_CAP = 1_000  # below the ~2k pod values
METADATA_TIMEOUT_S = 10.0
QUERY_TIMEOUT_S = 1.0
# Measured on the 202k-series fixture (2-core box): each capped call grows the server's RSS by
# <= 6 MiB. The same {__name__=~".+"} call without a cap (181k series answered) grew it by 126 MiB
# and took 5 s, so a regression to unbounded answers breaks this bound.
RSS_GROWTH_BOUND = 64 * MiB

server = server_fixture([
    f"--query.max-metadata-series={SERIES_CAP}", f"--query.max-label-values={VALUES_CAP}",
    f"--query.metadata-timeout={METADATA_TIMEOUT_S:g}s", f"--query.timeout={QUERY_TIMEOUT_S:g}s",
    '--query.blocked=.*\\{le!=""\\}.*;reason=label browser scan',
])

SERVER_CAP_WARNING = "results truncated to {} by the server (raise {} or narrow match[] and the time range)"
LIMIT_WARNING = "results truncated due to limit"  # Prometheus's text, web/api/v1/api.go

ATTACKS = [
    # (id, path, params, cap, setting that caps it)
    ("series le!= no range", "/api/v1/series", {"match[]": '{le!=""}'}, SERIES_CAP, "--query.max-metadata-series"),
    ("series any name", "/api/v1/series", {"match[]": '{__name__=~".+"}'}, SERIES_CAP, "--query.max-metadata-series"),
    ("grafana 12 series", "/api/v1/series", {"match[]": '{__name__!=""}', "limit": "40000"}, SERIES_CAP,
     "--query.max-metadata-series"),
    ("labels", "/api/v1/labels", {}, VALUES_CAP, "--query.max-label-values"),
    ("__name__ values", "/api/v1/label/__name__/values", {}, VALUES_CAP, "--query.max-label-values"),
    ("pod values", "/api/v1/label/pod/values", {}, VALUES_CAP, "--query.max-label-values"),
]


@pytest.fixture(scope="module")
def truth(loaded):
    """What the full answers would be, from the workload itself."""
    series = loaded.workload.series()
    return {
        "le": {lb for lb in series if any(n == "le" for n, _ in lb)},
        "all": set(series),
        "names": sorted({n for lb in series for n, _ in lb}),
        "metrics": sorted({dict(lb)["__name__"] for lb in series}),
        "gpu_temp": sum(1 for lb in series if dict(lb)["__name__"] == "DCGM_FI_DEV_GPU_TEMP"),
        "pods": sorted({dict(lb)["pod"] for lb in series if "pod" in dict(lb)}),
    }


def _full_answer(path: str, params: dict, truth) -> list | set:
    if path == "/api/v1/series":
        return truth["le"] if "le" in params["match[]"] else truth["all"]
    if path == "/api/v1/labels":
        return truth["names"]
    return truth["metrics"] if "__name__" in path else truth["pods"]


@pytest.mark.parametrize("name,path,params,cap,setting", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_bounded(server, truth, name, path, params, cap, setting, record_property):
    with rss_of(server.pid) as rss:
        status, body, seconds = timed_api(server.base_url, path, params)
    record_property("seconds", round(seconds, 3))
    record_property("rss", str(rss))
    print(f"{name}: {status} in {seconds:.2f}s, {len(body.get('data', []))} results; {rss}")
    assert status == 200, body
    # (a 200 is an answer within --query.metadata-timeout: past it the call is a 503)
    full = _full_answer(path, params, truth)
    data = body["data"]
    if len(full) > cap:
        assert len(data) == cap
        assert body["warnings"] == [SERVER_CAP_WARNING.format(cap, setting)]
    else:
        assert len(data) == len(full) and "warnings" not in body
    if path == "/api/v1/series":
        got = [tuple(sorted(d.items())) for d in data]
        assert len(set(got)) == len(got) and set(got) <= full  # distinct, real series that match
    else:
        assert data == full[:cap]  # sorted, and the first `cap` of the full answer
    assert rss.growth < RSS_GROWTH_BOUND, str(rss)


@pytest.mark.parametrize("path,params,n", [
    ("/api/v1/series", {"match[]": '{le!=""}', "limit": "5"}, 5),
    ("/api/v1/labels", {"limit": "3"}, 3),
    ("/api/v1/label/pod/values", {"limit": "3"}, 3),
    ("/api/v1/label/__name__/values", {"match[]": '{__name__=~"DCGM.*"}', "limit": "2"}, 2),
])
def test_limit_param_truncates_with_prometheus_warning(server, truth, path, params, n):
    status, body, _ = timed_api(server.base_url, path, params)
    assert status == 200, body
    assert len(body["data"]) == n
    assert body["warnings"] == [LIMIT_WARNING]
    if path.endswith("pod/values"):
        assert body["data"] == truth["pods"][:n]
    if path == "/api/v1/labels":
        assert body["data"] == truth["names"][:n]


def test_limit_not_reached_gives_no_warning(server, truth):
    status, body, _ = timed_api(server.base_url, "/api/v1/label/__name__/values", {"limit": "1000"})
    assert status == 200 and body["data"] == truth["metrics"] and "warnings" not in body
    # limit=0 means "no limit" in Prometheus: the server cap still applies
    status, body, _ = timed_api(server.base_url, "/api/v1/label/pod/values", {"limit": "0"})
    assert status == 200 and len(body["data"]) == VALUES_CAP and "by the server" in body["warnings"][0]


def test_tsdb_status_limit(server):
    status, body, seconds = timed_api(server.base_url, "/api/v1/status/tsdb", {"limit": "3"})
    assert status == 200, body
    d = body["data"]
    for key in ("seriesCountByMetricName", "labelValueCountByLabelName", "memoryInBytesByLabelName",
                "seriesCountByLabelValuePair"):
        assert len(d[key]) == 3, key
    top = d["seriesCountByMetricName"][0]
    assert top == {"name": "node_cpu_seconds_total", "value": 33472}  # the largest family of the workload
    # The Cardinality page over a window (every partition), then a metric's labels: the same figures here
    now = time.time()
    status, body, seconds = timed_api(server.base_url, "/api/v1/status/tsdb", {"limit": "3", "start": now - 86400,
                                                                              "end": now})
    assert status == 200 and body["data"]["seriesCountByMetricName"][0] == top, body
    print(f"tsdb status of a day over {body['data']['headStats']['numSeries']} series: {seconds:.2f}s")
    status, body, seconds = timed_api(server.base_url, "/api/v1/status/tsdb", {"match[]": top["name"], "topN": "3"})
    assert status == 200 and body["data"]["headStats"]["numSeries"] == top["value"], body
    print(f"tsdb status of {top['name']}: {seconds:.2f}s")


HEAVY = 'count({__name__=~".+"})'  # every series; held by the test hook so it outlasts any deadline


def test_request_timeout_shortens_the_deadline(server, loaded):
    hold = server.hold
    hold.engage()
    try:
        status, body, _ = timed_api(server.base_url, "/api/v1/query",
                                    {"query": HEAVY + hold.HELD, "time": loaded.end_s, "timeout": "200ms"},
                                    method="POST")
    finally:
        hold.release()
    assert status == 503, body
    assert body["errorType"] == "timeout"
    # the request's 200 ms fired, not the server's 1 s
    assert "after 0.2s" in body["error"] and "--query.timeout" in body["error"]
    assert hold.endings()[-1] == "timeout"


def test_request_timeout_cannot_extend_the_deadline(server, loaded):
    hold = server.hold
    before = metric(server.base_url, "metricsgw_guard_rejections_total", limit="query.timeout")
    hold.engage()
    try:
        # Held until its deadline: 1 s (--query.timeout) if the guard holds, 60 s if the request extended it.
        status, body, _ = timed_api(server.base_url, "/api/v1/query",
                                    {"query": HEAVY + hold.HELD, "time": loaded.end_s, "timeout": "60s"},
                                    method="POST")
    finally:
        hold.release()
    assert status == 503, body
    assert body["errorType"] == "timeout"
    assert f"after {QUERY_TIMEOUT_S:g}s" in body["error"] and "--query.timeout" in body["error"]
    assert hold.endings()[-1] == "timeout"
    assert metric(server.base_url, "metricsgw_guard_rejections_total", limit="query.timeout") == before + 1


def test_blocked_query_is_refused_with_the_reason(server, loaded, truth):
    status, body, _ = timed_api(server.base_url, "/api/v1/query", {"query": 'count({le!=""})', "time": loaded.end_s})
    assert status == 422, body
    assert body["errorType"] == "execution"
    assert "label browser scan" in body["error"] and "--query.blocked rule 1" in body["error"]
    # the rule is anchored: a query that does not contain the pattern runs
    status, body, _ = timed_api(server.base_url, "/api/v1/query",
                                {"query": "count(DCGM_FI_DEV_GPU_TEMP)", "time": loaded.end_s})
    assert status == 200 and body["data"]["result"][0]["value"][1] == str(truth["gpu_temp"])
