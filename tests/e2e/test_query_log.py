"""The query log (issue 32) through a real `metricsgw serve`, in the default layout (a front, an ingest shard, a query
process: the query process tells the front, which owns the log) and in one process: an answered query, one refused
by --query.max-samples, one timed out, one sent with Grafana's headers and one an administrator cancels are each
named, with their status, limit and source, in --query.log-file (Prometheus's query_log_file lines) and in
/api/v1/status/recent_queries, running_queries and top_queries; SIGHUP reopens the file, as logrotate needs.

Waits are liveness bounds only (a record reaches the front's log just after the answer): nothing here depends on
the machine's speed. The timed-out query is held (metricsgw/testhooks.py) until its deadline passes, so it is slow
(--query.slow-duration=1s, its timeout) by construction.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time
import urllib.parse
import urllib.request

import pytest

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.e2e.procs_helpers import wait_for
from tests.guard.helpers import QueryHold, metric

LAYOUTS = {"default": [], "single": ["--server.single-process"]}
GRAFANA = {"X-Dashboard-Uid": "gpu-fleet", "X-Panel-Id": "7", "X-Grafana-Org-Id": "1", "User-Agent": "Grafana/10.4.1"}
OK, REFUSED, GRAFANA_QUERY, PROXIED = "sum(m)", "m[30m]", "max(m)", "sum(m) - 1"
TIMED_OUT, CANCELED = "count(m)" + QueryHold.HELD, "min(m)" + QueryHold.HELD


@pytest.fixture(scope="module", params=list(LAYOUTS))
def gateway(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"query-log-{request.param}")
    hold = QueryHold(work / "hold")
    log_file = work / "queries.log"
    gw = start_metricsgw(work, env=hold.env, extra=[
        *LAYOUTS[request.param], f"--query.log-file={log_file}", "--query.max-samples=100",
        "--query.slow-duration=1s", "--web.enable-lifecycle"])
    try:
        gw.wait_ready()
        end_ms = (int(time.time()) - 5) * 1000
        series = [([("__name__", "m"), ("i", str(i))], [(end_ms - k * 15_000, float(k)) for k in range(30)])
                  for i in range(10)]  # 300 samples in the last 7.5 minutes: over --query.max-samples at once
        status, text, _ = remote_write(gw.base_url, encode_v1(series))
        assert status == 204, text
        yield gw, hold, log_file, end_ms / 1000
    finally:
        hold.release()
        gw.stop()


def _post(base: str, path: str, params: dict, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(base + path, data=urllib.parse.urlencode(params).encode(), method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _logged(path, query: str) -> dict:
    return wait_for(lambda: next((line for line in _lines(path) if line["params"]["query"] == query), None),
                    f"a query log line for {query!r}")


def test_each_query_is_named_with_its_status_limit_and_source(gateway):
    gw, hold, log_file, t = gateway
    assert _post(gw.base_url, "/api/v1/query", {"query": OK, "time": t})[0] == 200
    status, body = _post(gw.base_url, "/api/v1/query", {"query": REFUSED, "time": t})
    assert status == 422 and "--query.max-samples" in body["error"]
    assert _post(gw.base_url, "/api/v1/query_range", {"query": GRAFANA_QUERY, "start": t - 120, "end": t,
                                                      "step": 60}, GRAFANA)[0] == 200
    # a body over 32 KiB is proxied by the front rather than its connection handed off (procs/handoff.py)
    assert _post(gw.base_url, "/api/v1/query", {"query": PROXIED, "time": t, "pad": "x" * 40_000})[0] == 200
    hold.engage()
    try:
        status, body = _post(gw.base_url, "/api/v1/query", {"query": TIMED_OUT, "time": t, "timeout": "1s"})
    finally:
        hold.release()
    assert status == 503 and body["errorType"] == "timeout"

    ok = _logged(log_file, OK)
    assert ok["status"] == "ok" and "limit" not in ok and "error" not in ok
    assert ok["httpRequest"] == {"clientIP": "127.0.0.1", "method": "POST", "path": "/api/v1/query"}
    assert ok["params"]["start"] == ok["params"]["end"] and ok["params"]["step"] == 0
    assert ok["stats"]["samples"]["totalQueryableSamples"] > 0 and ok["bytes"]["response"] > 0
    assert {"evalTotalTime", "execQueueTime", "execTotalTime"} <= set(ok["stats"]["timings"])
    assert ok["ts"].endswith("Z")
    assert _logged(log_file, PROXIED)["httpRequest"]["clientIP"] == "127.0.0.1"
    refused = _logged(log_file, REFUSED)
    assert refused["status"] == "refused" and refused["limit"] == "--query.max-samples"
    assert "--query.max-samples" in refused["error"]
    timed_out = _logged(log_file, TIMED_OUT)
    assert timed_out["status"] == "timeout" and timed_out["limit"] == "--query.timeout" and timed_out["slow"]
    grafana = _logged(log_file, GRAFANA_QUERY)
    assert grafana["status"] == "ok" and grafana["userAgent"] == "Grafana/10.4.1"
    assert grafana["grafana"] == {k: v for k, v in GRAFANA.items() if k != "User-Agent"}
    assert grafana["params"]["step"] == 60 and grafana["httpRequest"]["path"] == "/api/v1/query_range"

    status, body = api(gw.base_url, "/api/v1/status/recent_queries", {"kind": ["refused", "timeout", "slow"]})
    assert status == 200
    lists = body["data"]
    assert [e["params"]["query"] for e in lists["refused"]] == [REFUSED]
    assert lists["refused"][0]["limit"] == "--query.max-samples"
    assert lists["refused"][0]["httpRequest"]["clientIP"] == "127.0.0.1"
    assert [e["params"]["query"] for e in lists["timeout"]] == [TIMED_OUT]
    assert TIMED_OUT in [e["params"]["query"] for e in lists["slow"]]
    assert api(gw.base_url, "/api/v1/status/recent_queries", {"kind": "nope"})[0] == 400

    status, top = api(gw.base_url, "/api/v1/status/top_queries", {"topN": 10})
    assert status == 200 and top["topN"] == "10"
    counted = {(e["query"], e["timeRangeSeconds"]): e["count"] for e in top["topByCount"]}
    assert counted[(OK, 0)] == 1 and counted[(GRAFANA_QUERY, 120)] == 1
    assert {e["query"] for e in top["topBySumDuration"]} >= {OK, REFUSED, TIMED_OUT, GRAFANA_QUERY}
    assert metric(gw.base_url, "metricsgw_query_log_dropped_lines_total") == 0


def test_an_administrator_sees_a_running_query_and_cancels_it(gateway):
    gw, hold, log_file, t = gateway
    hold.engage()
    reached = hold.reached()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            answer = pool.submit(_post, gw.base_url, "/api/v1/query", {"query": CANCELED, "time": t}, GRAFANA)
            hold.wait(lambda: hold.reached() == reached + 1, "the query is held")
            status, body = api(gw.base_url, "/api/v1/status/running_queries")
            assert status == 200
            [entry] = [e for e in body["data"] if e["params"]["query"] == CANCELED]
            assert entry["state"] == "running" and entry["elapsedSeconds"] >= 0
            assert entry["httpRequest"]["clientIP"] == "127.0.0.1" and entry["userAgent"] == "Grafana/10.4.1"
            assert entry["grafana"]["X-Dashboard-Uid"] == "gpu-fleet"
            assert api(gw.base_url, "/api/v1/admin/cancel_query", {"id": entry["id"]})[0] == 405  # POST only
            status, body = api(gw.base_url, "/api/v1/admin/cancel_query", {"id": entry["id"]}, method="POST")
            assert status == 200 and body["data"] == {"id": entry["id"], "canceled": True}
            status, body = answer.result(timeout=60)
        finally:
            hold.release()
    assert status == 499 and "administrator" in body["error"]
    canceled = _logged(log_file, CANCELED)
    assert canceled["status"] == "canceled" and "administrator" in canceled["error"]
    gone = api(gw.base_url, "/api/v1/admin/cancel_query", {"id": entry["id"]}, method="POST")
    assert gone[0] == 404 and gone[1]["errorType"] == "not_found"


def test_sighup_reopens_the_log_file_as_logrotate_needs(gateway):
    gw, hold, log_file, t = gateway
    rotated = log_file.with_suffix(".log.1")
    query = "sum(m) + 1"
    assert _post(gw.base_url, "/api/v1/query", {"query": query, "time": t})[0] == 200
    _logged(log_file, query)
    os.rename(log_file, rotated)
    os.kill(gw.pid, signal.SIGHUP)
    again = "sum(m) + 2"
    wait_for(lambda: _post(gw.base_url, "/api/v1/query", {"query": again, "time": t})[0] == 200
             and log_file.exists(), "a line in the reopened file")
    assert _logged(log_file, again)["status"] == "ok"
    assert query in [line["params"]["query"] for line in _lines(rotated)]
