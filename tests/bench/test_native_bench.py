"""bench.native on a tiny load: both servers take the histograms and give the same answers."""

from __future__ import annotations

import time

import pytest

from bench.native import QUERIES, _same, load_round, plan, run_one
from testkit import procs


def test_native_bench_runs_and_both_servers_agree(tmp_path):
    if not procs.Path(procs.PROMETHEUS).exists():
        pytest.skip(f"needs {procs.PROMETHEUS}")
    end_ms = int(time.time() * 1000) // 15_000 * 15_000
    streams, histograms, start_s, end_s = plan(3, 30, 1, end_ms)
    gw = run_one("metricsgw", streams, histograms, start_s, end_s, tmp_path / "gw", repeat=1)
    prom = run_one("prometheus", streams, histograms, start_s, end_s, tmp_path / "prom", repeat=1)
    assert gw["histograms"] == prom["histograms"] == 90 and gw["parquet_bytes_per_histogram"] > 0
    for q in QUERIES:
        assert gw["queries"][q]["answer"]["result"], q  # not an empty comparison
        assert _same(gw["queries"][q]["answer"], prom["queries"][q]["answer"]), q


def test_a_round_over_several_connections_sends_each_its_share(tmp_path):
    streams, histograms, _, _ = plan(5, 4, 2, int(time.time() * 1000) // 15_000 * 15_000)
    assert len(streams) == 2 and all(len(bodies) == 4 for bodies in streams)
    out = load_round("metricsgw", streams, tmp_path / "gw")  # raises if any request is refused
    assert out["load_s"] > 0 and histograms == 20
