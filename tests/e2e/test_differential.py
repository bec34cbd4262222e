"""Differential test: the same data in real Prometheus and in metricsgw, the same queries, the same answers.

Both servers receive, by remote write and in time order, 40 minutes of the bench workload
(2 GPU nodes + 1 control-plane node, 15 s scrapes, ending now) plus hand-made edge-case series
(staleness, NaN, counter resets, jittered timestamps; see queries.py), and a few scrapes of
metricsgw's own /metrics written identically to both (for the metricsgw dashboard). Every query in
queries.QUERIES and every dashboard panel query is then asked of both: instant queries at the
last sample, between samples, mid-range, past the end inside and beyond the 5m lookback; range
queries with odd steps and odd start/end alignments. Answers must be equal (tests/e2e/compare.py);
where Prometheus refuses a query, metricsgw must refuse it with the same status and errorType.
"""

from __future__ import annotations


import numpy as np
import pytest

from metricsgw.model import STALE_NAN
from testkit.procs import start_metricsgw, start_prometheus
from tests.dashboards.grafana import interpolate, load_dashboards, resolve_variables, targets
from tests.dashboards.loading import (INTERVAL_MS, SmallControlPlaneWorkload, aligned_now_ms, in_parallel,
                                      provoke_discard_and_guard_rejection, scrape_into, write_series, write_workload)
from tests.e2e import queries
from tests.e2e.client import api
from tests.e2e.compare import compare_servers, same_value, value_seq, values_by_time

GPU_NODES = 2
SCRAPES = 161  # 40 minutes at 15 s
SELF_SCRAPES = 6
FLUSH_EVERY_SAMPLES = 250_000

# (start offset from END, end offset from END, step): odd steps (as seconds and as durations),
# unaligned edges, past the end, across the start of the data (END-40m)
RANGES = [(-1800 + 3.3, 0, "37"), (-1200 - 0.25, 360, "61s"), (-600 + 1, -60, "7"), (-2400, 0, "2m13s"),
          (-3000, -1800, "29s")]
# instant times, offsets from END: the last sample, between samples, mid-range, just after the first
# sample (windows only partly filled), inside and beyond the lookback after the last sample
INSTANTS = [0, -7.5, -900, -1234.567, -2400 + 50, 100, 400]

DASHBOARDS = load_dashboards()
DASHBOARD_TARGETS = [t for name, d in DASHBOARDS.items() for t in targets(name, d)]


def edge_case_series(start_ms: int, end_ms: int) -> list:
    """The hand-made series of queries.py's docstring, each in time order."""
    grid = np.arange(start_ms, end_ms + 1, INTERVAL_MS)
    k = np.arange(len(grid))
    gauge = 50 + 10 * np.sin(k / 7.0)
    out = []

    def series(labels, ts, vs):
        out.append((labels, [(int(t), float(v)) for t, v in zip(ts, vs)]))

    stops = grid <= end_ms - 600_000
    series([("__name__", "stale_test"), ("case", "stops")], grid[stops], gauge[stops])
    before, after = grid <= end_ms - 1_200_000, grid >= end_ms - 600_000
    ts = np.concatenate([grid[before], [end_ms - 1_200_000 + INTERVAL_MS], grid[after]])
    vs = np.concatenate([gauge[before], [STALE_NAN], gauge[after]])
    series([("__name__", "stale_test"), ("case", "marker")], ts, vs)
    series([("__name__", "stale_test"), ("case", "nan")], grid, np.where(k % 17 == 5, np.nan, gauge))
    # counters: "a" resets twice (to small values), "b" drops to 0 every 6 minutes
    a = np.cumsum(1.0 + (k % 5))
    for reset_at in (end_ms - 1_500_000, end_ms - 420_000):
        a = np.where(grid >= reset_at, a - a[np.searchsorted(grid, reset_at)] + 2.0, a)
    series([("__name__", "reset_test_total"), ("case", "a")], grid, a)
    series([("__name__", "reset_test_total"), ("case", "b")], grid, 3.5 * (k % 24))
    # jittered timestamps (strictly increasing: jitter < interval) and a sparse, gappy counter
    rng = np.random.default_rng(42)
    jitter = rng.integers(0, 9_000, len(grid))
    increments = rng.uniform(0, 20, len(grid))
    series([("__name__", "irregular_total"), ("case", "jitter")], grid + jitter, np.cumsum(increments))
    sparse = (k % 3 == 0) & ~((k > 40) & (k < 70))
    series([("__name__", "irregular_total"), ("case", "sparse")], grid[sparse] + 1234, np.cumsum(sparse)[sparse] * 10.0)
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    work = tmp_path_factory.mktemp("differential")
    prom = start_prometheus(work / "prom")
    # a small head: the 1.1M samples end up in several Parquet flushes plus the head, so answers
    # come from the merged read path, not just memory
    gw = start_metricsgw(work / "gw", extra=[f"--storage.flush-max-samples={FLUSH_EVERY_SAMPLES}",
                                            "--query.promql-compat=2"])  # compared with 2.42
    try:
        prom.wait_ready()
        gw.wait_ready()
        workload = SmallControlPlaneWorkload(GPU_NODES, seed=3)
        end_ms = aligned_now_ms()
        start_ms = end_ms - (SCRAPES - 1) * INTERVAL_MS
        def load(server) -> None:
            write_workload(server.write_url, workload, end_ms, SCRAPES, samples_per_series=10)
            write_series(server.base_url, edge_case_series(start_ms, end_ms))

        in_parallel([(load, prom), (load, gw)])
        # metricsgw's own metrics, scraped once per step and written identically to both servers
        provoke_discard_and_guard_rejection(gw.base_url)
        instance = gw.base_url.removeprefix("http://")
        for k in range(SELF_SCRAPES):
            t_ms = end_ms - (SELF_SCRAPES - 1 - k) * INTERVAL_MS
            api(gw.base_url, "/api/v1/query", {"query": "sum(rate(up[1m]))", "time": t_ms / 1000})
            scrape_into([prom.base_url, gw.base_url], gw.base_url, "metricsgw", instance, t_ms)
        yield gw.base_url, prom.base_url, start_ms / 1000, end_ms / 1000
    finally:
        gw.stop()
        prom.stop()


def _times(query: str, start_s: float, end_s: float) -> str:
    return query.replace("<END>", f"{end_s:.3f}").replace("<START>", f"{start_s:.3f}")


def _check(pair, query: str, instants=INSTANTS, ranges=RANGES) -> None:
    gw_url, prom_url, start_s, end_s = pair
    query = _times(query, start_s, end_s)
    problems = []
    for dt in instants:
        params = {"query": query, "time": f"{end_s + dt:.3f}"}
        problems += compare_servers(gw_url, prom_url, "/api/v1/query", params, queries.ordered(query))
    for a, b, step in ranges:
        params = {"query": query, "start": f"{end_s + a:.3f}", "end": f"{end_s + b:.3f}", "step": step}
        problems += compare_servers(gw_url, prom_url, "/api/v1/query_range", params, False)
    assert not problems, "\n".join(problems[:6])


@pytest.mark.parametrize("query", queries.QUERIES)
def test_query_matches_prometheus(pair, query):
    _check(pair, query)


@pytest.fixture(scope="module")
def dashboard_values(pair):
    """Variables resolved against Prometheus (the oracle): All (.*) where the variable allows it, and
    the first value of every variable."""
    _, prom_url, start_s, end_s = pair

    def fetch(label: str, selector: str | None) -> list[str]:
        params = {"start": start_s, "end": end_s} | ({"match[]": selector} if selector else {})
        return api(prom_url, f"/api/v1/label/{label}/values", params)[1]["data"]

    return {name: (resolve_variables(d, fetch), resolve_variables(d, fetch, use_all=False))
            for name, d in DASHBOARDS.items()}


@pytest.mark.parametrize("target", DASHBOARD_TARGETS, ids=[t.name for t in DASHBOARD_TARGETS])
def test_dashboard_query_matches_prometheus(pair, dashboard_values, target):
    for values in dashboard_values[target.dashboard]:
        _check(pair, interpolate(target.expr, values), instants=[0, -7.5], ranges=[(-1800 + 3.3, 0, "37")])


def test_edge_cases_reach_prometheus(pair):
    """The oracle really holds the edge cases (else the comparisons above would prove little)."""
    _, prom_url, _, end_s = pair

    def cases(query: str, t: float) -> set[str]:
        _, body = api(prom_url, "/api/v1/query", {"query": query, "time": t})
        return {r["metric"].get("case") for r in body["data"]["result"]}

    assert cases("stale_test", end_s - 900) == {"stops", "nan"}  # the marker hides "marker"
    assert cases("stale_test", end_s) == {"marker", "nan"}  # "stops" ended 10m ago: past the lookback
    assert cases("stale_test", end_s - 400) == {"stops", "marker", "nan"}  # "stops" still in lookback
    assert cases("resets(reset_test_total[40m]) > 1", end_s) == {"a", "b"}
    assert cases('metricsgw_discarded_samples_total{reason!=""}', end_s) == {None}
    assert cases("metricsgw_guard_rejections_total", end_s) == {None}


def test_query_set_is_big_enough():
    assert len(queries.QUERIES) >= 50
    assert len(set(queries.QUERIES)) == len(queries.QUERIES)


def test_tie_blind_and_order_views():
    """The two relaxations above only forgive what they should: other series of equal value, tie order."""
    def vec(*pairs):
        return {"resultType": "vector", "result": [{"metric": {"s": s}, "value": [1, v]} for s, v in pairs]}

    assert values_by_time(vec(("a", "5"), ("b", "5"))) == values_by_time(vec(("c", "5"), ("a", "5")))
    assert values_by_time(vec(("a", "5"), ("b", "4"))) != values_by_time(vec(("a", "5"), ("c", "5")))
    assert not all(same_value(a, b) for a, b in zip(value_seq(vec(("a", "NaN"), ("b", "2"))), [2.0, float("nan")]))
    assert not same_value(1.0, 1.0 + 1e-6) and same_value(float("nan"), float("nan"))
