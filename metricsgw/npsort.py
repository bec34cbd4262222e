"""Sort-based set operations on 1-D integer arrays, in place of numpy's own.

numpy 2.4's ``np.unique`` (and ``np.isin``, ``np.union1d``, which call it) on 64-bit series ids is about 15x
slower than a sort and a mask, and it holds the GIL all the while: 1.0 s for 1M ids against 65 ms, with the
GIL held up to 270 ms at a time against under 2 ms (numpy's sorts release it). In an ingest shard a head read
calling it held up the event loop answering writes: bench.soak's write p99 under heavy queries. Ids are
hashes, spread over all 64 bits, the worst case for its hash table.

Every function returns what its numpy namesake returns for 1-D integer input (tests/test_npsort.py checks
them against numpy). Floats go to numpy (NaN handling), as does anything not 1-D.
"""

from __future__ import annotations

import numpy as np


def _numpy_only(a: np.ndarray) -> bool:
    return a.ndim != 1 or a.dtype.kind not in "iub"


def _first_of_runs(s: np.ndarray) -> np.ndarray:
    mask = np.empty(len(s), bool)
    if len(s):
        mask[0] = True
        np.not_equal(s[1:], s[:-1], out=mask[1:])
    return mask


def distinct_sorted(s: np.ndarray) -> np.ndarray:
    """The distinct values of an array sorted already: one pass, no sort."""
    return s[_first_of_runs(s)]


def run_starts(s: np.ndarray) -> np.ndarray:
    """Where each run of equal values of an array sorted already starts (int64 indexes): one pass, no sort."""
    return np.flatnonzero(_first_of_runs(s))


def unique(a) -> np.ndarray:
    """``np.unique(a)``: the distinct values, sorted."""
    a = np.asarray(a)
    if _numpy_only(a):
        return np.unique(a)
    s = np.sort(a)
    return s[_first_of_runs(s)]


def unique_first(a) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_index=True)``: the distinct values, sorted, and where each first occurs."""
    a = np.asarray(a)
    if _numpy_only(a):
        return np.unique(a, return_index=True)
    order = np.argsort(a, kind="stable")  # equal values keep their order: the first comes first
    s = a[order]
    mask = _first_of_runs(s)
    return s[mask], order[mask]


def unique_inverse(a) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)``: the distinct values, sorted, and each element's index in them."""
    a = np.asarray(a)
    if _numpy_only(a):
        u, inv = np.unique(a, return_inverse=True)
        return u, inv.reshape(-1)
    order = np.argsort(a, kind="stable")
    s = a[order]
    mask = _first_of_runs(s)
    inverse = np.empty(len(a), np.intp)
    inverse[order] = np.cumsum(mask) - 1
    return s[mask], inverse


def members(x, sorted_set: np.ndarray) -> np.ndarray:
    """``np.isin(x, sorted_set)`` for a set that is sorted already (and distinct): binary searches only."""
    x = np.asarray(x)
    if not len(sorted_set):
        return np.zeros(x.shape, bool)
    pos = np.minimum(np.searchsorted(sorted_set, x), len(sorted_set) - 1)
    return sorted_set[pos] == x


def isin(x, values) -> np.ndarray:
    """``np.isin(x, values)``."""
    x, values = np.asarray(x), np.asarray(values)
    if _numpy_only(x) or _numpy_only(values):
        return np.isin(x, values)
    return members(x, unique(values))


def union(a, b) -> np.ndarray:
    """``np.union1d(a, b)``."""
    return unique(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))
