"""Counter resets in rate/increase: Prometheus adds the value before each reset one by one. Many
series with huge counters must not blur a small series' correction (running-total precision)."""

from __future__ import annotations

import numpy as np

from metricsgw.limits.context import QueryContext
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource

STEP_MS = 15_000


def _prometheus_increase(t: np.ndarray, v: np.ndarray, lo_ms: int, hi_ms: int) -> float:
    """Prometheus 2.42's extrapolatedRate for increase(), sample by sample."""
    m = (t >= lo_ms) & (t <= hi_ms)
    ts, vs = t[m] / 1000.0, v[m]
    result, last = vs[-1] - vs[0], 0.0
    for x in vs:
        if x < last:
            result += last
        last = x
    start, end = lo_ms / 1000.0, hi_ms / 1000.0
    dur_start, dur_end, sampled = ts[0] - start, end - ts[-1], ts[-1] - ts[0]
    avg = sampled / (len(vs) - 1)
    if result > 0 and vs[0] >= 0:
        dur_start = min(dur_start, sampled * (vs[0] / result))
    interval = sampled + (dur_start if dur_start < avg * 1.1 else avg / 2) + (dur_end if dur_end < avg * 1.1 else avg / 2)
    return result * (interval / sampled)


def test_one_small_reset_beside_many_huge_counters_is_exact():
    src = MemSource()
    t = np.arange(0, 1_200_000, STEP_MS, dtype=np.int64)
    rng = np.random.default_rng(2)
    for i in range(300):  # byte counters near 1e15 that restart now and then
        v = 1e15 * (1 + i) + np.cumsum(rng.uniform(1e6, 1e7, len(t)))
        cut = int(rng.integers(5, len(t) - 5))
        v[cut:] -= v[cut] - rng.uniform(0, 1e6)
        src.add({"__name__": "bytes_total", "instance": f"a{i:03d}"}, t, v)
    small = 1000.0 + np.arange(len(t)) * 3.25
    small[40:] -= 1000.0 + 40 * 3.25 - 39.125  # a reset to 39.125 at sample 40
    src.add({"__name__": "bytes_total", "instance": "z-small"}, t, small)
    end = int(t[45])
    got = Engine(src, promql_compat=2).instant('increase(bytes_total{instance=~".*"}[5m])', end / 1000, QueryContext())
    want = _prometheus_increase(t, small, end - 300_000, end)
    by_instance = {dict(lb)["instance"]: v for lb, v in zip(got.labels, got.values)}
    assert by_instance["z-small"] == want
    for i in range(300):
        assert np.isfinite(by_instance[f"a{i:03d}"])


def test_range_rate_and_increase_match_prometheus_window_by_window():
    """Every (series, step) of a range query over counters with 0, 1 or several resets per
    window, irregular scrapes and short series, against the sample-by-sample reference."""
    src = MemSource()
    rng = np.random.default_rng(11)
    series = {}
    for i in range(60):
        n = int(rng.integers(1, 120))
        t = np.cumsum(rng.integers(5_000, 40_000, n)).astype(np.int64) + int(rng.integers(0, 600_000))
        v = np.cumsum(rng.uniform(0, 50, n)) + rng.uniform(-5, 100)  # some start below zero
        for cut in rng.integers(0, n, int(rng.integers(0, 6))):  # resets, sometimes several close
            v[cut:] -= v[cut] - rng.uniform(0, 3)
        src.add({"__name__": "c_total", "i": f"{i:02d}"}, t, v)
        series[f"{i:02d}"] = (t, v)
    engine, steps = Engine(src, promql_compat=2), np.arange(300_000, 3_000_001, 45_000)
    for fn, per_second in (("increase", False), ("rate", True)):
        got = engine.range(f"{fn}(c_total[4m])", steps[0] / 1000, steps[-1] / 1000, 45, QueryContext())
        checked = 0
        for k, labels in enumerate(got.labels):
            t, v = series[dict(labels)["i"]]
            pt, pv = got.points(k)
            want_t = [s for s in steps if ((t >= s - 240_000) & (t <= s)).sum() >= 2]
            assert pt.tolist() == want_t
            for s, x in zip(pt.tolist(), pv.tolist()):
                want = _prometheus_increase(t, v, s - 240_000, s) / (240.0 if per_second else 1.0)
                assert abs(x - want) <= 1e-12 * max(abs(want), 1.0), (fn, labels, s, x, want)
                checked += 1
        assert checked > 1000
