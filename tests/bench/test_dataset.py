"""bench.dataset + bench.queries end to end on a tiny workload: metricsgw, Prometheus and
VictoriaMetrics get the same history, a second open reuses it without loading, and the query
benchmark reports all three (metricsgw must find Prometheus's answers; VictoriaMetrics's agreement
is reported, not asserted: its rate() and lookback legitimately differ)."""

from __future__ import annotations

import json

import pytest

from bench import engine_cpu
from bench.dataset import DatasetPlan, open_dataset
from bench.queries import METRICSGW, PROMETHEUS, VICTORIA_METRICS, post, run, table
from testkit import procs
from testkit.panels import DASHBOARD_QUERIES

pytestmark = pytest.mark.skipif(not (procs.Path(procs.PROMETHEUS).exists()
                                     and procs.Path(procs.VICTORIA_METRICS).exists()),
                                reason="needs /usr/bin/prometheus and /usr/bin/victoria-metrics")


def series_at(base: str, t_s: float) -> int:
    status, body, _ = post(base, "/api/v1/query", {"query": 'count({__name__=~".+"})', "time": f"{t_s:.3f}"})
    assert status == 200, body
    return int(float(body["data"]["result"][0]["value"][1]))


def test_dataset_loads_once_and_three_servers_answer(tmp_path, capsys):
    plan = DatasetPlan(nodes=2, history_s=600, slab_scrapes=15, samples_per_series=5)
    ds = open_dataset(tmp_path, plan)
    try:
        saved = json.loads((tmp_path / "dataset.json").read_text())
        assert saved["num_series"] == ds.num_series > 1000
        assert set(saved["load_s"]) == {METRICSGW, PROMETHEUS, VICTORIA_METRICS}
        # every series of the workload, at the last scrape, in each server
        assert [series_at(s.base_url, ds.end_ms / 1000) for s in ds.servers] == [ds.num_series] * 3
        queries = (("cpu busy", '1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m]))'),
                   ("apiserver codes", "sum by (code) (rate(apiserver_request_total[5m]))"))
        results = run({s.name: s.base_url for s in ds.servers}, ds.end_ms / 1000, 300, 30, 1, queries)
        assert [r.agree[METRICSGW] for r in results] == [True, True], [r.error for r in results]
        assert all(VICTORIA_METRICS in r.agree for r in results)  # compared, whatever the verdict
        assert all(r.series[METRICSGW] == r.series[PROMETHEUS] == r.series[VICTORIA_METRICS] > 0 for r in results)
        out = table(results)
        assert "median latency ratio metricsgw/prom" in out and "median latency ratio metricsgw/vm" in out
        assert "| gw ms | prom ms | vm ms |" in out and "vm same as prom" in out
    finally:
        ds.stop()
    # bench.engine_cpu over the stopped dataset's copy: every panel evaluated in one process
    capsys.readouterr()
    engine_cpu.main(["--dir", str(tmp_path), "--copy-to", str(tmp_path / "copy"), "--repeat", "2"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == [p for p, _ in DASHBOARD_QUERIES] + ["total"]
    again = open_dataset(tmp_path, plan)  # same plan: no second load
    try:
        assert again.end_ms == ds.end_ms and again.load_s == saved["load_s"]
        assert series_at(again.victoria_metrics.base_url, ds.end_ms / 1000) == ds.num_series  # kept across restart
    finally:
        again.stop()
    with pytest.raises(RuntimeError, match="holds other data"):
        open_dataset(tmp_path, DatasetPlan(nodes=3, history_s=600))
