"""The running queries a process lists, and an administrator's cancel of one through its QueryContext."""

from __future__ import annotations

import pytest

from metricsgw.errors import QueryCanceled
from metricsgw.limits.context import QueryContext
from metricsgw.querylog.record import Source
from metricsgw.querylog.running import RunningQueries, RunningQuery


def test_listed_with_text_source_state_and_what_it_holds_then_gone():
    running = RunningQueries()
    queued, evaluating = QueryContext(), QueryContext()
    evaluating.admitted = evaluating.started
    evaluating.charge_loaded(1000, "parquet read")
    a = running.add(RunningQuery("up", Source("10.0.0.1", "GET", "/api/v1/query"), 10.0, 10.0, 0, queued,
                                 queued.started))
    b = running.add(RunningQuery("sum(x)", Source("10.0.0.2", "POST", "/api/v1/query_range", "Grafana/11",
                                                  {"X-Panel-Id": "4"}), 0.0, 600.0, 60, evaluating,
                                 evaluating.started))
    first, second = running.listing()
    assert (first["id"], first["state"], first["params"]) == (str(a), "queued", {
        "query": "up", "start": "1970-01-01T00:00:10.000Z", "end": "1970-01-01T00:00:10.000Z", "step": 0})
    assert first["httpRequest"] == {"clientIP": "10.0.0.1", "method": "GET", "path": "/api/v1/query"}
    assert "userAgent" not in first and "grafana" not in first
    assert (second["id"], second["state"], second["userAgent"], second["grafana"]) == (
        str(b), "running", "Grafana/11", {"X-Panel-Id": "4"})
    assert second["stats"]["samples"]["totalQueryableSamples"] == 1000 and second["bytes"]["held"] == 24_000
    assert second["elapsedSeconds"] >= 0
    running.remove(a)
    assert [e["id"] for e in running.listing()] == [str(b)]


def test_cancel_stops_the_query_at_its_next_check():
    running = RunningQueries()
    ctx = QueryContext()
    qid = running.add(RunningQuery("up", Source(), None, None, 0, ctx, ctx.started))
    assert running.cancel(qid, "canceled by an administrator")
    with pytest.raises(QueryCanceled, match="canceled by an administrator"):
        ctx.check("evaluation")
    running.remove(qid)
    assert not running.cancel(qid, "again")
