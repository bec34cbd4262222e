"""metricsgw/npsort.py returns exactly what numpy's set operations return, for every input shape it takes."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw import npsort


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    kind = seed % 4
    if kind == 0:  # series ids: hashes over 64 bits
        return rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64), rng
    if kind == 1:  # many repeats
        return rng.integers(0, 7, n).astype(np.int64), rng
    if kind == 2:  # codes
        return rng.integers(0, 50, n).astype(np.int32), rng
    return np.sort(rng.integers(0, 1000, n)).astype(np.int64), rng  # sorted already


@pytest.mark.parametrize("seed", range(40))
def test_each_function_equals_numpy(seed):
    a, rng = _inputs(seed)
    b = np.concatenate([a[: len(a) // 2], rng.integers(-5, 1000, 40).astype(a.dtype)])
    assert npsort.unique(a).tolist() == np.unique(a).tolist()
    assert npsort.unique(a).dtype == np.unique(a).dtype
    for got, want in zip(npsort.unique_first(a), np.unique(a, return_index=True)):
        assert got.tolist() == want.tolist()
    for got, want in zip(npsort.unique_inverse(a), np.unique(a, return_inverse=True)):
        assert got.tolist() == want.tolist()
    assert npsort.isin(a, b).tolist() == np.isin(a, b).tolist()
    assert npsort.isin(b, a).tolist() == np.isin(b, a).tolist()
    assert npsort.members(b, np.unique(a)).tolist() == np.isin(b, a).tolist()
    assert npsort.union(a, b).tolist() == np.union1d(a, b).tolist()
    s = np.sort(a)
    assert npsort.run_starts(s).tolist() == np.unique(s, return_index=True)[1].tolist()


def test_floats_and_2d_go_to_numpy():
    f = np.array([np.nan, 1.0, np.nan, 1.0])
    assert np.array_equal(npsort.unique(f), np.unique(f), equal_nan=True)  # numpy folds the NaNs into one
    m = np.array([[True, False], [True, False], [False, False]])
    assert npsort.unique(m).tolist() == np.unique(m).tolist()
