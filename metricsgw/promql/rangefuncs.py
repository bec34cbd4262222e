"""Functions of a range vector (rate family, *_over_time), for every (series, step) at once.

Each window is the index range [lo, hi) into one series' samples (see ``Ranges``); sums and
counts come from prefix sums, first/last samples from the window bounds. The formulas follow
Prometheus 2.42's promql/functions.go.
"""

from __future__ import annotations

import numpy as np

from .value import Ranges, Series, drop_name


def _prefix(x: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(x, dtype=np.float64)])


def _win_sum(r: Ranges, x: np.ndarray) -> np.ndarray:
    """Sum of x over each window. Prefix sums are exact for small integers; otherwise
    reduceat sums each window sequentially, in sample order, as Prometheus does."""
    if len(x) and np.isfinite(x).all() and np.abs(x).max() < 2**50 / len(x) and _integral(x):
        c = _prefix(x)
        return c[r.hi] - c[r.lo]
    return _reduce_windows(r, x, np.add)


def _integral(x: np.ndarray) -> bool:
    return bool(np.all(x == np.round(x)))


def _per_window(r: Ranges, fn, x: np.ndarray | None = None) -> np.ndarray:
    """fn over each non-empty window: the slow path for order-sensitive reductions."""
    x = r.v if x is None else x
    out = np.zeros(r.lo.shape)
    for i, k in zip(*np.nonzero(r.hi > r.lo)):
        out[i, k] = fn(x[r.lo[i, k] : r.hi[i, k]])
    return out


def _series(r: Ranges, values: np.ndarray, mask: np.ndarray, keep_name: bool = False) -> Series:
    labels = list(r.labels) if keep_name else [drop_name(l) for l in r.labels]
    return Series(labels, np.where(mask, values, 0.0), mask).compact()


def _first_last(r: Ranges):
    n = r.hi - r.lo
    lo = np.minimum(r.lo, max(len(r.t) - 1, 0))
    hi1 = np.clip(r.hi - 1, 0, max(len(r.t) - 1, 0))
    if len(r.t) == 0:
        z = np.zeros(r.lo.shape)
        return n, z, z, z.astype(np.int64), z.astype(np.int64)
    return n, r.v[lo], r.v[hi1], r.t[lo], r.t[hi1]


def extrapolated_rate(r: Ranges, is_counter: bool, is_rate: bool) -> Series:
    n, v0, v1, t0, t1 = _first_last(r)
    ok = n >= 2
    result = v1 - v0
    if is_counter and len(r.v):
        prev = np.concatenate([[0.0], r.v[:-1]])
        corr = np.where(r.v < prev, prev, 0.0)
        corr[r.offsets[:-1][r.offsets[:-1] < len(corr)]] = 0.0  # no reset across series
        c = _prefix(corr)
        lo1 = np.minimum(r.lo + 1, len(r.v))
        result = result + np.where(ok, c[np.maximum(r.hi, lo1)] - c[lo1], 0.0)
    range_start = (r.range_end - r.range_ms)[None, :]
    range_end = r.range_end[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        to_start = (t0 - range_start) / 1000.0
        to_end = (range_end - t1) / 1000.0
        sampled = (t1 - t0) / 1000.0
        avg_gap = sampled / np.maximum(n - 1, 1)
        if is_counter:
            to_zero = sampled * (v0 / result)
            clamp = (result > 0) & (v0 >= 0) & (to_zero < to_start)
            to_start = np.where(clamp, to_zero, to_start)
        thresh = avg_gap * 1.1
        interval = sampled.copy()
        interval += np.where(to_start < thresh, to_start, avg_gap / 2)
        interval += np.where(to_end < thresh, to_end, avg_gap / 2)
        factor = interval / sampled
        if is_rate:
            factor = factor / (r.range_ms / 1000.0)
        out = result * factor
    return _series(r, out, ok)


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


def changes(r: Ranges) -> Series:
    prev = np.concatenate([[np.nan], r.v[:-1]]) if len(r.v) else r.v
    flags = (r.v != prev) & ~(np.isnan(r.v) & np.isnan(prev))
    return _series(r, _pair_count(r, flags), r.hi > r.lo)


def resets(r: Ranges) -> Series:
    prev = np.concatenate([[np.nan], r.v[:-1]]) if len(r.v) else r.v
    return _series(r, _pair_count(r, r.v < prev), r.hi > r.lo)


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


def over_time(name: str, r: Ranges) -> Series:
    n = (r.hi - r.lo).astype(np.float64)
    has = n > 0
    if name == "count_over_time":
        return _series(r, n, has)
    if name == "present_over_time":
        return _series(r, np.ones(n.shape), has)
    if name == "sum_over_time":
        return _series(r, _win_sum(r, r.v), has)
    if name == "avg_over_time":
        s = _win_sum(r, r.v)
        with np.errstate(divide="ignore", invalid="ignore"):
            avg = s / n
        bad = has & ~np.isfinite(s)
        if bad.any():  # overflow: Prometheus's incremental mean stays finite
            avg[bad] = _per_window(r, _incremental_mean)[bad]
        return _series(r, avg, has)
    if name == "min_over_time":
        return _series(r, _minmax(r, np.fmin), has)  # NaN only when all are NaN
    if name == "max_over_time":
        return _series(r, _minmax(r, np.fmax), has)
    if name == "last_over_time":
        _, _, v1, _, _ = _first_last(r)
        return _series(r, v1, has, keep_name=True)
    if name in ("stddev_over_time", "stdvar_over_time"):
        var = _per_window(r, lambda w: float(np.var(w)))
        return _series(r, np.sqrt(var) if name == "stddev_over_time" else var, has)
    raise KeyError(name)


def _incremental_mean(w: np.ndarray) -> float:
    mean = 0.0
    for i, x in enumerate(w.tolist(), 1):
        if np.isinf(mean) and (np.isinf(x) and (mean > 0) == (x > 0) or not np.isinf(x) and not np.isnan(x)):
            continue
        mean += x / i - mean / i
    return mean


def quantile_over_time(q: np.ndarray, r: Ranges) -> Series:
    from .aggregations import quantile_sorted

    out = np.zeros(r.lo.shape)
    for i, k in zip(*np.nonzero(r.hi > r.lo)):
        w = r.v[r.lo[i, k] : r.hi[i, k]]
        nan = np.isnan(w)  # Prometheus's sort puts NaN first
        out[i, k] = quantile_sorted(q[k], np.concatenate([w[nan], np.sort(w[~nan])]))
    return _series(r, out, r.hi > r.lo)


def linear_regression(r: Ranges, intercept_ms: np.ndarray | None):
    """slope, intercept per window; intercept time = first sample (deriv) or given times."""
    n = r.hi - r.lo
    slope = np.zeros(n.shape)
    icpt = np.zeros(n.shape)
    for i, k in zip(*np.nonzero(n >= 2)):
        a, b = r.lo[i, k], r.hi[i, k]
        t, y = r.t[a:b], r.v[a:b]
        base = t[0] if intercept_ms is None else intercept_ms[k]
        if np.all(y == y[0]):
            slope[i, k], icpt[i, k] = (np.nan, np.nan) if np.isinf(y[0]) else (0.0, y[0])
            continue
        x = (t - base) / 1e3
        cnt = float(len(x))
        sx, sy, sxy, sx2 = x.sum(), y.sum(), (x * y).sum(), (x * x).sum()
        cov = sxy - sx * sy / cnt
        var = sx2 - sx * sx / cnt
        with np.errstate(divide="ignore", invalid="ignore"):
            slope[i, k] = cov / var
        icpt[i, k] = sy / cnt - slope[i, k] * sx / cnt
    return slope, icpt, n >= 2


def deriv(r: Ranges) -> Series:
    slope, _, ok = linear_regression(r, None)
    return _series(r, slope, ok)


def predict_linear(r: Ranges, eval_ms: np.ndarray, duration: np.ndarray) -> Series:
    slope, icpt, ok = linear_regression(r, eval_ms)
    return _series(r, slope * duration[None, :] + icpt, ok)
