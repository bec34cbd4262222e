"""The query log through one process's app: every way a PromQL query ends is recorded once, with its status and the
limit that fired, in --query.log-file and the recent lists; top queries in VictoriaMetrics' shape; the running list;
and cancel, an admin endpoint behind --web.enable-lifecycle."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.web.middleware import Roles

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
CALLS = [  # (path, form, status, the query log's status and limit)
    ("/api/v1/query", {"query": "vector(1)", "time": "100"}, 200, ("ok", None)),
    ("/api/v1/query", {"query": "sum(" * 10 + "x" + ")" * 10, "time": "100"}, 400, ("refused", "--query.max-depth")),
    ("/api/v1/query", {"query": "secret_metric", "time": "100"}, 422, ("refused", "--query.blocked")),
    ("/api/v1/query", {"query": "sum(", "time": "100"}, 400, ("error", None)),
    ("/api/v1/query_range", {"query": "vector(2)", "start": "0", "end": "100000", "step": "1"}, 400,
     ("refused", "--query.max-points-per-series")),
    ("/api/v1/query_range", {"query": "vector(3)", "start": "0", "end": "600", "step": "60"}, 200, ("ok", None)),
]


def make_app(tmp_path, **settings):
    return build_app(load({"storage.path": str(tmp_path / "data"), "query.log-file": str(tmp_path / "q.log"),
                           "query.max-depth": "5", "query.blocked": ["secret_.*"], **settings}))


async def _session(app, calls):
    async with TestClient(TestServer(app)) as client:
        while not app[appkeys.STORAGE].ready:
            await asyncio.sleep(0.01)
        out = []
        for method, path, params in calls:
            resp = await client.request(method, path, data=params if method == "POST" else None,
                                        params=params if method == "GET" else None, headers=FORM)
            out.append((resp.status, await resp.text()))
        return out


def test_every_ending_is_recorded_with_its_status_and_limit(tmp_path):
    app = make_app(tmp_path)
    answers = asyncio.run(_session(app, [("POST", path, form) for path, form, _, _ in CALLS] + [
        ("GET", "/api/v1/status/recent_queries", {"kind": "refused"}),
        ("GET", "/api/v1/status/top_queries", {"topN": "1", "maxLifetime": "1h"}),
        ("GET", "/api/v1/status/running_queries", {})]))
    assert [status for status, _ in answers[:len(CALLS)]] == [want for _, _, want, _ in CALLS]
    lines = [json.loads(line) for line in (tmp_path / "q.log").read_text().splitlines()]  # closed with the app
    assert [(line["status"], line.get("limit")) for line in lines] == [outcome for _, _, _, outcome in CALLS]
    assert [line["params"]["query"] for line in lines] == [form["query"] for _, form, _, _ in CALLS]
    assert lines[-1]["params"]["step"] == 60 and lines[-1]["httpRequest"]["path"] == "/api/v1/query_range"
    assert "start" not in lines[1]["params"]  # refused before its time was read
    assert "parse error" in lines[3]["error"]

    recent = json.loads(answers[len(CALLS)][1])["data"]
    assert [e["limit"] for e in recent["refused"]] == ["--query.max-points-per-series", "--query.blocked",
                                                      "--query.max-depth"]
    top = json.loads(answers[len(CALLS) + 1][1])
    assert set(top) == {"topN", "maxLifetime", "search.queryStats.lastQueriesCount", "search.queryStats.minQueryDuration",
                        "search.queryStats.minQueryMemoryUsage", "topByCount", "topByAvgDuration", "topBySumDuration",
                        "topByAvgMemoryUsage"}
    assert (top["topN"], top["maxLifetime"], len(top["topByCount"])) == ("1", "3600s", 1)
    assert json.loads(answers[len(CALLS) + 2][1]) == {"status": "success", "data": []}


def test_cancel_is_an_admin_endpoint(tmp_path):
    closed = make_app(tmp_path)
    [(status, text)] = asyncio.run(_session(closed, [("POST", "/api/v1/admin/cancel_query", {"id": "1"})]))
    assert (status, text) == (403, "Lifecycle API is not enabled.")
    assert not Roles(read_only=frozenset({"viewer"})).allows("viewer", "/api/v1/admin/cancel_query")

    app = make_app(tmp_path, **{"web.enable-lifecycle": "true"})
    (gone, gone_text), (bad, _) = asyncio.run(_session(app, [("POST", "/api/v1/admin/cancel_query", {"id": "7"}),
                                                          ("POST", "/api/v1/admin/cancel_query", {"id": "x"})]))
    assert gone == 404 and json.loads(gone_text)["errorType"] == "not_found" and bad == 400


def test_a_request_without_a_query_is_not_recorded(tmp_path):
    app = make_app(tmp_path)
    [(status, _)] = asyncio.run(_session(app, [("POST", "/api/v1/query", {"time": "1"})]))
    assert status == 400 and (tmp_path / "q.log").read_text() == ""
