"""bench.native on a tiny load: both servers take the histograms and give the same answers."""

from __future__ import annotations

import time

import pytest

from bench.native import QUERIES, _same, run_one
from testkit import procs


def test_native_bench_runs_and_both_servers_agree(tmp_path):
    if not procs.Path(procs.PROMETHEUS).exists():
        pytest.skip(f"needs {procs.PROMETHEUS}")
    end_ms = int(time.time() * 1000) // 15_000 * 15_000
    gw = run_one("metricsgw", 3, 30, end_ms, tmp_path / "gw", repeat=1)
    prom = run_one("prometheus", 3, 30, end_ms, tmp_path / "prom", repeat=1)
    assert gw["histograms"] == prom["histograms"] == 90 and gw["parquet_bytes_per_histogram"] > 0
    for q in QUERIES:
        assert gw["queries"][q]["answer"]["result"], q  # not an empty comparison
        assert _same(gw["queries"][q]["answer"], prom["queries"][q]["answer"]), q
