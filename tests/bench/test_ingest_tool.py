"""bench.ingest end to end on a tiny workload with metricsgw, Prometheus and VictoriaMetrics:
each server takes the whole load, says it holds every series, has the samples on disk, and the
table has a column per server and metricsgw's ratio to each of the two others. No speed is asserted."""

from __future__ import annotations

import pytest

from bench import ingest
from testkit import procs
from testkit.load import Plan, prepare

pytestmark = pytest.mark.skipif(not (procs.Path(procs.PROMETHEUS).exists()
                                     and procs.Path(procs.VICTORIA_METRICS).exists()),
                                reason="needs /usr/bin/prometheus and /usr/bin/victoria-metrics")


def test_ingest_runs_three_servers_on_the_same_load(tmp_path):
    plan = Plan(nodes=2, duration_s=60, connections=2)
    workload, preamble, shards = prepare(plan)
    samples = workload.num_series * plan.scrapes
    results = {kind: ingest.run_one(kind, shards, preamble, workload.num_series, 120.0, tmp_path, [])
               for kind in ingest.STARTERS}
    for kind, r in results.items():
        assert r["load"]["samples_ok"] == samples and r["load"]["requests_failed"] == 0, (kind, r["log_tail"])
        assert r["active_series"] == workload.num_series, kind  # the server's own count (status/tsdb)
        assert r["disk_running"]["total"] > 0, kind
    vm = results["victoria-metrics"]
    assert vm["disk_stopped"]["parts"]["data"] > 0 and vm["disk_stopped"]["parts"]["indexdb"] > 0  # at rest
    out = ingest.table(results)
    assert "| figure | metricsgw | prometheus | victoria-metrics | metricsgw / Prometheus | " \
           "metricsgw / VictoriaMetrics |" in out
    assert "RSS bytes / active series" in out and "server CPU cores busy" in out
