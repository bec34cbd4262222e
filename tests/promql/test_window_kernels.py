"""The compiled window kernels (promql/window_kernels.py) against the numpy paths they replace, on the same
windows: the same insertion indices, the same rate/increase/delta floats bit for bit (NaN included), in both
PromQL versions; and several counter resets in one window added one by one, as Prometheus does, by both."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.promql import rangefuncs, window_kernels
from metricsgw.promql.selectors import _search_grid
from metricsgw.promql.value import Ranges

from tests.promql.numpy_windows import numpy_windows


def _series_samples(rng, n: int, counter: bool):
    segs_t, segs_v = [], []
    for _ in range(n):
        t = np.unique(rng.integers(0, 400_000, int(rng.integers(0, 40)))).astype(np.int64)
        if counter:  # increments, with resets now and then (to zero or to a small value)
            v = np.cumsum(rng.choice([0.0, 0.1, 0.2, 0.7, 1e15, 3.0], len(t)))
            for cut in rng.integers(0, len(t), int(rng.integers(0, 4))) if len(t) else ():
                v[cut:] -= v[cut] - rng.choice([0.0, 0.3])
        else:
            v = rng.normal(0, 10, len(t))
        if len(v) and rng.random() < 0.2:
            v[rng.integers(0, len(v))] = np.nan
        segs_t.append(t)
        segs_v.append(v)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in segs_t])]).astype(np.int64)
    t = np.concatenate(segs_t) if n else np.empty(0, np.int64)
    v = np.concatenate(segs_v) if n else np.empty(0)
    return offsets, t.astype(np.int64), v.astype(np.float64)


def _ranges(rng, counter: bool, left_open: bool) -> Ranges:
    offsets, t, v = _series_samples(rng, int(rng.integers(0, 8)), counter)
    step = int(rng.choice([1_000, 15_000, 30_000, 60_000]))
    first = int(rng.integers(-50_000, 300_000))
    steps = int(rng.integers(1, 30))
    range_ms = int(rng.choice([15_000, 60_000, 300_000]))
    ends = first + step * np.arange(steps, dtype=np.int64)
    lo = _search_grid(offsets, t, ends - range_ms, "right" if left_open else "left")
    hi = _search_grid(offsets, t, ends, "right")
    return Ranges([(("i", str(i)),) for i in range(len(offsets) - 1)], t, v, offsets, lo, hi, ends, range_ms)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), np.nan, x).view(np.int64)  # one NaN pattern; every other bit must match


@pytest.mark.parametrize("side", ["left", "right"])
def test_grid_search_compiled_equals_numpy(side):
    rng = np.random.default_rng(5)
    for trial in range(300):
        offsets, t, _ = _series_samples(rng, int(rng.integers(0, 6)), False)
        step = int(rng.choice([1, 7, 1000, 15_000]))
        times = int(rng.integers(-60_000, 400_000)) + step * np.arange(int(rng.integers(1, 40)), dtype=np.int64)
        if len(t) and trial % 3 == 0:  # grid points on samples
            times = t[0] + step * np.arange(len(times), dtype=np.int64)
        compiled = _search_grid(offsets, t, times, side)
        with numpy_windows():
            assert window_kernels.grid_search(offsets, t, 0, 1, 1, side) is None
            plain = _search_grid(offsets, t, times, side)
        assert compiled.dtype == plain.dtype and np.array_equal(compiled, plain), trial


@pytest.mark.parametrize("prometheus_3", [True, False], ids=["3.x", "2.x"])
@pytest.mark.parametrize("fn", ["rate", "increase", "delta"])
def test_rate_family_compiled_equals_numpy_bit_for_bit(fn, prometheus_3):
    rng = np.random.default_rng(17)
    counter, is_rate = fn != "delta", fn == "rate"
    windows_with_resets = 0
    for trial in range(400):
        r = _ranges(rng, counter, prometheus_3)
        compiled = rangefuncs.extrapolated_rate(r, counter, is_rate, prometheus_3)
        with numpy_windows():
            plain = rangefuncs.extrapolated_rate(r, counter, is_rate, prometheus_3)
        assert compiled.labels == plain.labels, trial
        assert np.array_equal(compiled.mask, plain.mask), trial
        assert np.array_equal(_bits(compiled.values), _bits(plain.values)), trial
        windows_with_resets += int((np.diff(r.v) < 0).sum())
    assert windows_with_resets > 100  # the resets path ran, many times


def _prometheus_increase(t: np.ndarray, v: np.ndarray, start_ms: int, end_ms: int) -> float:
    """Prometheus' extrapolatedRate for increase() over [start, end], sample by sample (2.42's order)."""
    result, last = v[-1] - v[0], 0.0
    for x in v:
        if x < last:
            result += last
        last = x
    ts = t / 1000.0
    dur_start, dur_end, sampled = ts[0] - start_ms / 1000.0, end_ms / 1000.0 - ts[-1], ts[-1] - ts[0]
    avg = sampled / (len(v) - 1)
    if result > 0 and v[0] >= 0:
        dur_start = min(dur_start, sampled * (v[0] / result))
    dur_start = dur_start if dur_start < avg * 1.1 else avg / 2
    dur_end = dur_end if dur_end < avg * 1.1 else avg / 2
    return result * ((sampled + dur_start + dur_end) / sampled)


@pytest.mark.parametrize("numpy", [False, True], ids=["compiled", "numpy"])
def test_several_resets_in_one_window_add_one_by_one(numpy):
    # In float64 the order of the additions shows in the answer: Prometheus' ((0.1 + 0.1) + 0.2) + 0.7 is 1.1,
    # the resets' sum taken at once and then added (numpy's reduceat, as an earlier version did) 1.0999999999999999.
    v = np.array([0.0, 0.1, 0.0, 0.2, 0.0, 0.7, 0.0, 0.1])
    t = np.arange(len(v), dtype=np.int64) * 15_000
    assert ((0.1 + 0.1) + 0.2) + 0.7 != 0.1 + np.add.reduceat(np.array([0.1, 0.2, 0.7, 0.0]), [0, 3])[0]
    offsets = np.array([0, len(v)], np.int64)
    ends = np.array([t[-1]], np.int64)
    r = Ranges([()], t, v, offsets, np.array([[0]]), np.array([[len(v)]]), ends, 120_000)
    with numpy_windows(numpy):
        got = rangefuncs.extrapolated_rate(r, True, False, False)
    want = _prometheus_increase(t, v, int(ends[0]) - 120_000, int(ends[0]))
    assert got.values[0, 0] == want
