"""Prometheus's own loops over a window's samples (Kahan-Neumaier sums, running mean, Welford's variance,
Holt-Winters), run for every window at once: iteration j handles the j-th sample of every window that has one.

Apart from rangefuncs.py because these must add in Prometheus's order, sample after sample, to give its
floating-point answer bit for bit; the rest of rangefuncs works from prefix sums and window bounds. The loop runs
once per sample position of the longest window, never once per sample.
"""

from __future__ import annotations

import numpy as np

from .value import Ranges


def _kahan_inc(inc, total, c):
    t = total + inc
    c = c + np.where(np.abs(total) >= np.abs(inc), (total - t) + inc, (inc - t) + total)
    return t, c


def _positions(r: Ranges):
    """Windows sorted by length (longest first), so the windows that have a j-th sample are
    always a prefix: yields (k, x) with x the j-th sample of the first k windows."""
    n = r.hi - r.lo
    ne = np.flatnonzero((n > 0).ravel())
    lens = n.ravel()[ne]
    order = np.argsort(-lens, kind="stable")
    lo = r.lo.ravel()[ne][order]
    lens = lens[order]
    neg = -lens  # ascending, for searchsorted

    def steps():
        for j in range(int(lens[0]) if len(lens) else 0):
            k = int(np.searchsorted(neg, -j, side="left"))  # windows with more than j samples
            yield j, k, r.v[lo[:k] + j]

    def scatter(res: np.ndarray) -> np.ndarray:
        out = np.zeros(n.size)
        out[ne[order]] = res
        return out.reshape(n.shape)

    scatter.step_of = ne[order] % n.shape[1] if n.size else ne  # type: ignore[attr-defined]
    scatter.lo = lo  # type: ignore[attr-defined]  # each window's first sample, in this order
    return len(lens), lens, steps, scatter


def kahan_sum_windows(r: Ranges) -> np.ndarray:
    m, _, steps, scatter = _positions(r)
    total, c = np.zeros(m), np.zeros(m)
    with np.errstate(invalid="ignore", over="ignore"):
        for _, k, x in steps():
            total[:k], c[:k] = _kahan_inc(x, total[:k], c[:k])
        return scatter(np.where(np.isinf(total), total, total + c))


def avg_windows(r: Ranges) -> np.ndarray:
    m, _, steps, scatter = _positions(r)
    mean, c = np.zeros(m), np.zeros(m)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j, k, x in steps():
            cnt = float(j + 1)
            cur, cc = mean[:k], c[:k]
            m2, c2 = _kahan_inc(x / cnt - cur / cnt, cur, cc)
            inf = np.isinf(cur)
            if inf.any():  # Prometheus keeps an infinite mean unless the next value is NaN/-Inf
                skip = inf & ((np.isinf(x) & ((cur > 0) == (x > 0))) | (~np.isinf(x) & ~np.isnan(x)))
                m2, c2 = np.where(skip, cur, m2), np.where(skip, cc, c2)
            mean[:k], c[:k] = m2, c2
        return scatter(np.where(np.isinf(mean), mean, mean + c))


def _kahan_inc3(inc, total, c):
    """Prometheus 3's kahansum.Inc: as _kahan_inc, but the compensation restarts at 0 once the sum is infinite."""
    t = total + inc
    c = np.where(np.isinf(t), 0.0, c + np.where(np.abs(total) >= np.abs(inc), (total - t) + inc, (inc - t) + total))
    return t, c


def avg_windows3(r: Ranges) -> np.ndarray:
    """Prometheus 3's avg_over_time: a Kahan sum divided by the count, until the sum would overflow; from then on
    an incremental mean (so values near the float limits average to a finite number)."""
    m, lens, steps, scatter = _positions(r)
    total, c, mean = np.zeros(m), np.zeros(m), np.zeros(m)
    incremental = np.zeros(m, bool)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j, k, x in steps():
            if j == 0:
                total[:k] = x
                continue
            cnt = float(j + 1)
            inc = incremental[:k]
            t2, c2 = _kahan_inc3(x, total[:k], c[:k])
            summing = ~inc & ~np.isinf(t2)
            total[:k] = np.where(summing, t2, total[:k])
            c_now = np.where(summing, c2, c[:k])
            starts = ~inc & ~summing  # the sum overflows here: on with the mean of the samples so far
            mean_now = np.where(starts, total[:k] / (cnt - 1), mean[:k])
            c_now = np.where(starts, c_now / (cnt - 1), c_now)
            going = inc | starts
            q = (cnt - 1) / cnt
            m2, c3 = _kahan_inc3(x / cnt, q * mean_now, q * c_now)
            mean[:k] = np.where(going, m2, mean_now)
            c[:k] = np.where(going, c3, c_now)
            incremental[:k] = going
        n = lens.astype(np.float64)
        return scatter(np.where(incremental, mean + c, total / n + c / n))


def var_windows(r: Ranges) -> np.ndarray:
    m, lens, steps, scatter = _positions(r)
    mean, c_mean, aux, c_aux = np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for j, k, x in steps():
            cnt = float(j + 1)
            delta = x - (mean[:k] + c_mean[:k])
            mean[:k], c_mean[:k] = _kahan_inc(delta / cnt, mean[:k], c_mean[:k])
            aux[:k], c_aux[:k] = _kahan_inc(delta * (x - (mean[:k] + c_mean[:k])), aux[:k], c_aux[:k])
        return scatter((aux + c_aux) / lens)


def holt_winters_values(r: Ranges, sf: np.ndarray, tf: np.ndarray) -> np.ndarray:
    """Prometheus 2.42's funcHoltWinters (double exponential smoothing) of every window (a window of fewer than
    two samples has none: the caller masks it)."""
    from ..errors import ExecError

    for name, f in (("smoothing", sf), ("trend", tf)):
        bad = (f <= 0) | (f >= 1) | np.isnan(f)
        if bad.any():
            short = "sf" if name == "smoothing" else "tf"
            raise ExecError(f"invalid {name} factor. Expected: 0 < {short} < 1, got: {float(f[bad][0]):f}")
    m, lens, steps, scatter = _positions(r)
    step_of = scatter.step_of
    s0, s1, b = np.zeros(m), np.zeros(m), np.zeros(m)
    with np.errstate(invalid="ignore", over="ignore"):
        for j, k, x in steps():
            if j == 0:
                s1[:k] = x
                continue
            if j == 1:
                b[:k] = x - s1[:k]  # initial trend: second minus first sample
            sfk, tfk = sf[step_of[:k]], tf[step_of[:k]]
            if j > 1:
                b[:k] = tfk * (s1[:k] - s0[:k]) + (1 - tfk) * b[:k]
            y = (1 - sfk) * (s1[:k] + b[:k])
            s0[:k], s1[:k] = s1[:k], sfk * x + y
    return scatter(s1)


def linear_regression(r: Ranges, intercept_ms: np.ndarray | None):
    """slope, intercept per window, as Prometheus's linearRegression: x is seconds from the window's first sample
    (deriv) or from intercept_ms (predict_linear), sums are Kahan-Neumaier's, sample by sample. Each window's
    result depends on its own samples only: not on the series read with it (promql/batching.py) nor on the
    query's range (a cached stretch of steps joins a new one bit for bit: promql/results_cache.py)."""
    n_all = r.hi - r.lo
    ok = n_all >= 2
    shape = n_all.shape
    m, lens, steps, scatter = _positions(r)
    if m == 0 or not ok.any():
        z = np.zeros(shape)
        return z, z.copy(), ok
    lo = scatter.lo
    origin = r.t[lo] if intercept_ms is None else intercept_ms[scatter.step_of]
    first = r.v[lo]
    sums = [np.zeros(m) for _ in range(8)]  # x, y, xy, xx and their compensations
    const = np.ones(m, bool)
    with np.errstate(invalid="ignore", over="ignore"):
        for j, k, y in steps():
            x = (r.t[lo[:k] + j] - origin[:k]) / 1e3
            if j:
                const[:k] &= y == first[:k]
            for i, inc in enumerate((x, y, x * y, x * x)):
                sums[2 * i][:k], sums[2 * i + 1][:k] = _kahan_inc(inc, sums[2 * i][:k], sums[2 * i + 1][:k])
        sx, sy, sxy, sxx = (sums[2 * i] + sums[2 * i + 1] for i in range(4))
        n = lens.astype(np.float64)
        with np.errstate(divide="ignore"):
            slope = (sxy - sx * sy / n) / (sxx - sx * sx / n)
            icpt = sy / n - slope * sx / n
    inf = np.isinf(first)
    slope = np.where(const, np.where(inf, np.nan, 0.0), slope)
    icpt = np.where(const, np.where(inf, np.nan, first), icpt)
    return scatter(slope), scatter(icpt), ok


def ts_of_extreme_windows(r: Ranges, largest: bool) -> np.ndarray:
    """Prometheus 3's ts_of_max_over_time / ts_of_min_over_time: the time (in seconds) of each window's largest
    (smallest) sample, as compareOverTime walks the window: a sample replaces the one held when it is at least as
    large (small), so the last of equal extremes wins, or when the one held is NaN."""
    m, _, steps, scatter = _positions(r)
    lo = scatter.lo
    best, at = np.zeros(m), np.zeros(m, np.int64)
    with np.errstate(invalid="ignore"):
        for j, k, x in steps():
            cur = best[:k]
            take = (x >= cur) if largest else (x <= cur)
            take |= np.isnan(cur)
            if j == 0:
                take[:] = True
            best[:k] = np.where(take, x, cur)
            at[:k] = np.where(take, lo[:k] + j, at[:k])
    return scatter(r.t[at] / 1000.0 if m else np.zeros(0))
