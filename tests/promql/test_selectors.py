"""Window search: the counting path for uniform step grids agrees with binary search."""

import numpy as np
import pytest

from metricsgw.promql.selectors import _search_grid, search_many


def _binary(offsets, t, times, side):
    out = np.empty((len(offsets) - 1, len(times)), np.int64)
    for i in range(len(offsets) - 1):
        a, b = offsets[i], offsets[i + 1]
        out[i] = a + np.searchsorted(t[a:b], times, side=side)
    return out


@pytest.mark.parametrize("side", ["left", "right"])
def test_grid_counting_matches_binary_search(side):
    rng = np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(1, 6))
        segs = [np.unique(rng.integers(-50_000, 50_000, int(rng.integers(0, 30)))) for _ in range(n)]
        t = np.concatenate(segs).astype(np.int64) if segs else np.empty(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in segs])]).astype(np.int64)
        step = int(rng.choice([1, 7, 1000, 15_000, 29_000]))
        start = int(rng.integers(-60_000, 60_000))
        times = start + step * np.arange(int(rng.integers(1, 40)), dtype=np.int64)
        # grid points exactly on samples too
        if len(t) and trial % 3 == 0:
            times = t[0] + step * np.arange(len(times), dtype=np.int64)
        assert np.array_equal(_search_grid(offsets, t, times, side), _binary(offsets, t, times, side)), trial
        assert np.array_equal(search_many(offsets, t, [(times, side)])[0], _binary(offsets, t, times, side))


def test_non_uniform_times_take_the_binary_search():
    t = np.array([1, 5, 9, 2, 3], np.int64)
    offsets = np.array([0, 3, 5], np.int64)
    times = np.array([0, 5, 6, 100], np.int64)
    assert np.array_equal(search_many(offsets, t, [(times, "right")])[0], _binary(offsets, t, times, "right"))
