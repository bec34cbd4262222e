"""quantile_over_time is vectorised over all windows; check it against the per-window
definition (Prometheus's quantile over values sorted NaN first) on random windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metricsgw.promql import rangefuncs
from metricsgw.promql.aggregations import quantile_sorted
from metricsgw.promql.value import Ranges


@np.errstate(invalid="ignore")
def _reference(q: np.ndarray, r: Ranges) -> np.ndarray:
    out = np.zeros(r.lo.shape)
    for i, k in zip(*np.nonzero(r.hi > r.lo)):
        w = r.v[r.lo[i, k]: r.hi[i, k]]
        nan = np.isnan(w)
        out[i, k] = quantile_sorted(q[k], np.concatenate([w[nan], np.sort(w[~nan])]))
    return out


def _random_ranges(rng: np.random.Generator, n_series: int, n_steps: int) -> Ranges:
    counts = rng.integers(0, 30, n_series)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    v = rng.normal(size=int(counts.sum())).round(1)  # ties on purpose
    special = rng.random(len(v))
    v[special < 0.05] = np.nan
    v[(special >= 0.05) & (special < 0.08)] = np.inf
    v[(special >= 0.08) & (special < 0.1)] = -np.inf
    t = np.concatenate([np.arange(c, dtype=np.int64) * 1000 for c in counts]) if len(v) else np.empty(0, np.int64)
    lo = np.empty((n_series, n_steps), np.int64)
    hi = np.empty((n_series, n_steps), np.int64)
    for i in range(n_series):
        a, b = offsets[i], offsets[i + 1]
        x = rng.integers(a, b + 1, (2, n_steps))
        lo[i], hi[i] = x.min(axis=0), x.max(axis=0)
    labels = [(("__name__", "m"), ("i", str(i))) for i in range(n_series)]
    return Ranges(labels, t, v, offsets, lo, hi, np.arange(n_steps, dtype=np.int64), 10_000)


@pytest.mark.parametrize("seed", range(5))
def test_matches_per_window_definition(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    r = _random_ranges(rng, 40, 12)
    q = rng.choice([0.0, 0.25, 0.5, 0.9, 0.99, 1.0, -0.5, 1.5, math.nan], size=12)
    if seed % 2:
        monkeypatch.setattr(rangefuncs, "_CHUNK", 7)  # many small chunks, windows split across none
    got = rangefuncs.quantile_over_time(q, r)
    want = _reference(q, r)
    has = r.hi > r.lo
    rows = np.flatnonzero(has.any(axis=1))
    assert [r.labels[i][1:] for i in rows] == [l for l in got.labels]
    np.testing.assert_array_equal(got.mask, has[rows])
    np.testing.assert_array_equal(got.values, np.where(has[rows], want[rows], 0.0))
