"""Functions of a range vector (rate family, *_over_time), for every (series, step) at once.

Each window is the index range [lo, hi) into one series' samples (see ``Ranges``); sums and
counts come from prefix sums, first/last samples from the window bounds. The formulas follow
Prometheus 2.42's promql/functions.go.
"""

from __future__ import annotations

import numpy as np

from .. import npsort
from . import window_kernels
from .value import Ranges, Series, drop_names
from .window_loops import (avg_windows, avg_windows3, holt_winters_values, kahan_sum_windows, linear_regression,
                           ts_of_extreme_windows, var_windows)


def _prefix(x: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(x, dtype=np.float64)])


def _exact_small_integers(x: np.ndarray) -> bool:
    """Sums of these are exact in float64, so prefix sums equal any summation order."""
    return bool(len(x) and np.isfinite(x).all() and np.abs(x).max() < 2**50 / len(x) and np.all(x == np.round(x)))


def _series(r: Ranges, values: np.ndarray, mask: np.ndarray, keep_name: bool = False) -> Series:
    labels = list(r.labels) if keep_name else drop_names(r.labels)
    return Series(labels, np.where(mask, values, 0.0), mask).compact()


def _first_last(r: Ranges):
    n = r.hi - r.lo
    if len(r.t) == 0:
        z = np.zeros(r.lo.shape)
        return n, z, z, z.astype(np.int64), z.astype(np.int64)
    last = len(r.t) - 1
    lo = np.minimum(r.lo, last)
    hi1 = r.hi - 1
    np.clip(hi1, 0, last, out=hi1)
    # np.take: the same elements as fancy indexing, a good deal faster for a 1-D source
    return n, np.take(r.v, lo), np.take(r.v, hi1), np.take(r.t, lo), np.take(r.t, hi1)


def _add_resets(r: Ranges, result: np.ndarray) -> None:
    """Adds to each window's ``result`` the value just before each counter reset inside it, one by one in
    time order as Prometheus does (so several resets round as they do there). Resets are rare: found once (a
    drop from the previous sample of the same series; a drop at a series' first sample, from the previous
    series' last, is none), and a window's resets are a searchsorted range of them."""
    drop = r.v[1:] < r.v[:-1]
    pos = np.flatnonzero(drop) + 1
    if len(pos):
        pos = pos[~npsort.isin(pos, r.offsets)]
    if not len(pos):
        return
    before = r.v[pos - 1]
    # Only the rows whose samples hold a reset need looking at (a window's samples lie between
    # its row's first lo and last hi); for them, a window's resets strictly inside it, positions
    # in (lo, hi), are a binary-searched range of ``pos``.
    row_lo, row_hi = r.lo.min(axis=1), r.hi.max(axis=1)
    rows = np.flatnonzero(np.searchsorted(pos, row_hi) > np.searchsorted(pos, np.minimum(row_lo + 1, len(r.v))))
    if not len(rows):
        return
    lo1 = np.minimum(r.lo[rows] + 1, len(r.v))
    a = np.searchsorted(pos, lo1)
    count = np.searchsorted(pos, np.maximum(r.hi[rows], lo1)) - a  # resets in the window
    sub = result[rows]
    for j in range(int(count.max())):  # the j-th reset of every window that has one
        has = count > j
        sub[has] += before[a[has] + j]
    result[rows] = sub


def extrapolated_rate(r: Ranges, is_counter: bool, is_rate: bool, prometheus_3: bool) -> Series:
    compiled = window_kernels.extrapolated_rate(r.t, r.v, r.lo, r.hi, r.range_end, r.range_ms, is_counter, is_rate,
                                                prometheus_3)
    if compiled is not None:
        return _series(r, *compiled)
    n, v0, v1, t0, t1 = _first_last(r)
    ok = n >= 2
    result = v1 - v0
    if is_counter and len(r.v):
        _add_resets(r, result)
    factor = extrapolation_factor(r, n, t0, t1, is_rate, (v0, result) if is_counter else None, prometheus_3)
    with np.errstate(invalid="ignore"):
        factor *= result  # result * factor: IEEE multiplication commutes bit for bit
    return _series(r, factor, ok)


def extrapolation_factor(r: Ranges, n: np.ndarray, t0: np.ndarray, t1: np.ndarray, is_rate: bool,
                         counter: tuple[np.ndarray, np.ndarray] | None, prometheus_3: bool) -> np.ndarray:
    """What rate/increase/delta multiply a window's raw difference by (extrapolatedRate);
    ``counter`` = (first value, difference) lets a counter's extrapolation stop at zero. Prometheus 3 stops
    at zero after shortening a start too far from the first sample to half a sample gap; 2.42 before."""
    range_start = (r.range_end - r.range_ms)[None, :]
    range_end = r.range_end[None, :]
    # The formulas of extrapolatedRate, step by step in place: the same IEEE operations in
    # the same order as the plain expressions, with a few (series x step) buffers instead of
    # one fresh array per operation.
    with np.errstate(divide="ignore", invalid="ignore"):
        to_start = np.subtract(t0, range_start)
        to_start = np.divide(to_start, 1000.0)
        to_end = np.subtract(range_end, t1)
        to_end = np.divide(to_end, 1000.0)
        sampled = np.subtract(t1, t0)
        sampled = np.divide(sampled, 1000.0)
        gaps = np.subtract(n, 1)
        np.maximum(gaps, 1, out=gaps)
        avg_gap = np.divide(sampled, gaps)
        thresh = avg_gap * 1.1
        avg_gap /= 2
        if prometheus_3:  # to_start if to_start < thresh else avg_gap / 2 (NaN compares false: avg_gap / 2)
            np.copyto(to_start, avg_gap, where=~(to_start < thresh))
        if counter is not None:
            v0, result = counter
            to_zero = np.divide(v0, result)
            to_zero *= sampled  # sampled * (v0 / result)
            clamp = result > 0
            clamp &= v0 >= 0
            clamp &= to_zero < to_start
            np.copyto(to_start, to_zero, where=clamp)
        if not prometheus_3:
            np.copyto(to_start, avg_gap, where=~(to_start < thresh))
        np.copyto(to_end, avg_gap, where=~(to_end < thresh))
        interval = np.add(sampled, to_start, out=to_start)
        interval += to_end
        factor = np.divide(interval, sampled, out=interval)
        if is_rate:
            factor /= r.range_ms / 1000.0
    return factor


def instant_rate(r: Ranges, is_rate: bool) -> Series:
    """irate / idelta: from the last two samples of each window."""
    n = r.hi - r.lo
    ok = n >= 2
    if len(r.t) == 0:
        return _series(r, np.zeros(n.shape), ok)
    i1 = np.clip(r.hi - 1, 0, len(r.t) - 1)
    i0 = np.clip(r.hi - 2, 0, len(r.t) - 1)
    v1, v0 = r.v[i1], r.v[i0]
    dt = (r.t[i1] - r.t[i0]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if is_rate:
            res = np.where(v1 < v0, v1, v1 - v0) / (dt / 1000.0)
            ok = ok & (dt != 0)
        else:
            res = v1 - v0
    return _series(r, res, ok)


def _pair_count(r: Ranges, flags: np.ndarray) -> np.ndarray:
    """Number of sample pairs (i-1, i) inside each window with flags[i] set."""
    f = flags.astype(np.float64)
    if len(f):
        f[r.offsets[:-1][r.offsets[:-1] < len(f)]] = 0.0
    c = _prefix(f)
    lo1 = np.minimum(r.lo + 1, len(f))
    return c[np.maximum(r.hi, lo1)] - c[lo1]


def pairs_flagged(r: Ranges, flags: np.ndarray) -> Series:
    """For each window, the pairs of consecutive samples in it whose later one is flagged (changes, resets)."""
    return _series(r, _pair_count(r, flags), r.hi > r.lo)


def changes(r: Ranges) -> Series:
    prev = np.concatenate([[np.nan], r.v[:-1]]) if len(r.v) else r.v
    return pairs_flagged(r, (r.v != prev) & ~(np.isnan(r.v) & np.isnan(prev)))


def resets(r: Ranges) -> Series:
    prev = np.concatenate([[np.nan], r.v[:-1]]) if len(r.v) else r.v
    return pairs_flagged(r, r.v < prev)


def _reduce_windows(r: Ranges, x: np.ndarray, ufunc) -> np.ndarray:
    """ufunc-reduce x over every non-empty window (windows may overlap)."""
    n = r.hi - r.lo
    out = np.zeros(n.shape)
    if len(x) == 0:
        return out
    v = np.concatenate([x, [0.0]])  # reduceat needs every index < len
    ne = n > 0
    idx = np.stack([r.lo[ne], r.hi[ne]], axis=1).ravel()
    if len(idx):
        out[ne] = ufunc.reduceat(v, idx)[::2]
    return out


def _minmax(r: Ranges, ufunc) -> np.ndarray:
    return _reduce_windows(r, r.v, ufunc)


def over_time(name: str, r: Ranges, prometheus_3: bool = True) -> Series:
    n = (r.hi - r.lo).astype(np.float64)
    has = n > 0
    if name == "count_over_time":
        return _series(r, n, has)
    if name == "present_over_time":
        return _series(r, np.ones(n.shape), has)
    if name == "sum_over_time":
        if _exact_small_integers(r.v):
            c = _prefix(r.v)
            return _series(r, c[r.hi] - c[r.lo], has)
        return _series(r, kahan_sum_windows(r), has)
    if name == "avg_over_time":
        return _series(r, avg_windows3(r) if prometheus_3 else avg_windows(r), has)
    if name == "min_over_time":
        return _series(r, _minmax(r, np.fmin), has)  # NaN only when all are NaN
    if name == "max_over_time":
        return _series(r, _minmax(r, np.fmax), has)
    if name == "last_over_time":
        _, _, v1, _, _ = _first_last(r)
        return _series(r, v1, has, keep_name=True)
    if name == "first_over_time":
        _, v0, _, _, _ = _first_last(r)
        return _series(r, v0, has, keep_name=True)
    if name == "ts_of_first_over_time":
        _, _, _, t0, _ = _first_last(r)
        return _series(r, t0 / 1000.0, has)
    if name == "ts_of_last_over_time":
        _, _, _, _, t1 = _first_last(r)
        return _series(r, t1 / 1000.0, has)
    if name in ("ts_of_max_over_time", "ts_of_min_over_time"):
        return _series(r, ts_of_extreme_windows(r, name == "ts_of_max_over_time"), has)
    if name == "mad_over_time":
        return _series(r, _median_deviations(r), has)
    if name in ("stddev_over_time", "stdvar_over_time"):
        var = var_windows(r)
        return _series(r, np.sqrt(var) if name == "stddev_over_time" else var, has)
    raise KeyError(name)


def quantile_over_time(q: np.ndarray, r: Ranges) -> Series:
    """Prometheus's quantile over each window's samples (sorted NaN first, linear interpolation).

    All windows at once: their samples are gathered side by side and sorted by (window, NaN
    first, value) in one lexsort, in chunks of about _CHUNK gathered samples."""
    has = r.hi > r.lo
    out = np.zeros(r.lo.shape)
    flat = out.ravel()
    steps = r.lo.shape[1]
    q = np.asarray(q, np.float64)
    for wi, lo, lens in _chunks(r):
        flat[wi] = _window_quantiles(r.v, lo, lens, q[wi % steps])
    return _series(r, out, has)


_CHUNK = 1 << 22


def _chunks(r: Ranges):
    """The non-empty windows of ``r`` (flat indexes), in runs of about _CHUNK gathered samples: yields
    (window indexes, their first samples, their lengths)."""
    wi = np.flatnonzero((r.hi > r.lo).ravel())
    lo_all = r.lo.ravel()[wi]
    len_all = (r.hi - r.lo).ravel()[wi]
    ends = np.cumsum(len_all)
    a = 0
    while a < len(wi):
        b = max(a + 1, int(np.searchsorted(ends, (ends[a - 1] if a else 0) + _CHUNK, "right")))
        yield wi[a:b], lo_all[a:b], len_all[a:b]
        a = b


def _median_deviations(r: Ranges) -> np.ndarray:
    """Prometheus 3's mad_over_time: the median of each window's absolute deviations from its median (both
    medians as quantile(0.5) takes them); NaN for a window holding a NaN."""
    out = np.zeros(r.lo.shape)
    flat = out.ravel()
    for wi, lo, lens in _chunks(r):
        half = np.full(len(wi), 0.5)
        base = np.cumsum(lens) - lens  # where each window starts among the gathered samples
        median = _window_quantiles(r.v, lo, lens, half)
        gathered = r.v[np.repeat(lo - base, lens) + np.arange(int(lens.sum()))]
        deviations = np.abs(gathered - np.repeat(median, lens))
        mad = _window_quantiles(deviations, base, lens, half)
        any_nan = np.add.reduceat(np.isnan(gathered), base) > 0
        flat[wi] = np.where(any_nan, np.nan, mad)
    return out


def _window_quantiles(v: np.ndarray, lo: np.ndarray, lens: np.ndarray, qk: np.ndarray) -> np.ndarray:
    base = np.cumsum(lens) - lens  # where each window starts among the gathered samples
    w = np.repeat(np.arange(len(lens)), lens)
    x = v[np.repeat(lo - base, lens) + np.arange(int(lens.sum()))]
    nan = np.isnan(x)
    xs = x[np.lexsort((np.where(nan, 0.0, x), ~nan, w))]
    n = lens.astype(np.float64)
    with np.errstate(invalid="ignore"):
        rank = qk * (n - 1)
        lower = np.maximum(0.0, np.floor(rank))
        upper = np.minimum(n - 1, lower + 1)
        weight = rank - np.floor(rank)
        valid = (qk >= 0) & (qk <= 1)
        li = base + np.where(valid, lower, 0).astype(np.int64)
        ui = base + np.where(valid, upper, 0).astype(np.int64)
        res = xs[li] * (1 - weight) + xs[ui] * weight
    res = np.where(qk < 0, -np.inf, res)
    res = np.where(qk > 1, np.inf, res)
    return np.where(np.isnan(qk), np.nan, res)


def deriv(r: Ranges) -> Series:
    slope, _, ok = linear_regression(r, None)
    return _series(r, slope, ok)


def predict_linear(r: Ranges, eval_ms: np.ndarray, duration: np.ndarray) -> Series:
    slope, icpt, ok = linear_regression(r, eval_ms)
    return _series(r, slope * duration[None, :] + icpt, ok)


def holt_winters(r: Ranges, sf: np.ndarray, tf: np.ndarray) -> Series:
    """Prometheus 2.42's funcHoltWinters (double exponential smoothing), all windows at once."""
    return _series(r, holt_winters_values(r, sf, tf), (r.hi - r.lo) >= 2)
