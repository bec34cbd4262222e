"""bench.restart on a tiny workload: each server is loaded, killed with SIGKILL, restarted and timed,
and metricsgw's restart has every series of the probe metric at the last scrape."""

from __future__ import annotations

import time

import pytest

from bench.restart import PROBE_METRIC, run_one, table
from testkit import procs
from testkit.load import Plan, prepare


@pytest.mark.parametrize("kind", ["metricsgw", "prometheus", "victoria-metrics"])
def test_restart_bench_runs_and_metricsgw_loses_nothing(tmp_path, kind):
    binary = {"prometheus": procs.PROMETHEUS, "victoria-metrics": procs.VICTORIA_METRICS}.get(kind)
    if binary and not procs.Path(binary).exists():
        pytest.skip(f"needs {binary}")
    end_ms = int(time.time()) // 15 * 15_000
    workload, preamble, shards = prepare(Plan(1, duration_s=30.0, end_ms=end_ms))
    expect = sum(1 for lb in workload.series() if dict(lb).get("__name__") == PROBE_METRIC)
    result = run_one(kind, shards, preamble, expect, end_ms / 1000, tmp_path, time_limit_s=120)
    assert result["samples_acked"] == 2 * workload.num_series and result["requests_failed"] == 0
    assert result["ready_s"] is not None and result["disk_bytes_per_sample"] > 0
    if kind == "metricsgw":  # kill -9 right after the last 204: everything acknowledged is back
        assert result["probe_series_found"] == expect > 0, result["log_tail"]
    assert kind in table({kind: result})
