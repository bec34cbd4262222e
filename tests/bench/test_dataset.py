"""bench.dataset + bench.queries end to end on a tiny workload: both servers get the same
history, a second open reuses it without loading, and the query benchmark finds the same answers."""

from __future__ import annotations

import json

import pytest

from bench import procs
from bench.dataset import DatasetPlan, open_dataset
from bench.queries import run, table

pytestmark = pytest.mark.skipif(not procs.Path(procs.PROMETHEUS).exists(), reason="needs /usr/bin/prometheus")


def test_dataset_loads_once_and_both_servers_answer_alike(tmp_path):
    plan = DatasetPlan(nodes=2, history_s=600, slab_scrapes=15, samples_per_series=5)
    ds = open_dataset(tmp_path, plan)
    try:
        saved = json.loads((tmp_path / "dataset.json").read_text())
        assert saved["num_series"] == ds.num_series > 1000
        queries = (("cpu busy", '1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m]))'),
                   ("apiserver codes", "sum by (code) (rate(apiserver_request_total[5m]))"))
        results = run(ds.metricsgw.base_url, ds.prometheus.base_url, ds.end_ms / 1000, 300, 30, 1, queries)
        assert [r.agree for r in results] == [True, True], [r.error for r in results]
        assert all(r.series["a"] == r.series["b"] > 0 for r in results)
        assert "median latency ratio" in table(results)
    finally:
        ds.stop()
    again = open_dataset(tmp_path, plan)  # same plan: no second load
    try:
        assert again.end_ms == ds.end_ms and again.load_s == saved["load_s"]
    finally:
        again.stop()
    with pytest.raises(RuntimeError, match="holds other data"):
        open_dataset(tmp_path, DatasetPlan(nodes=3, history_s=600))
