"""The numba kernels of window_kernels.py (imported only by its loader: importing numba costs ~0.4 s and
~60 MiB, paid in the background at a query process' start).

Both walk each series' samples once, in time order, with the windows of a uniform step grid moving over them:
O(samples + series x steps) with no temporary arrays, where numpy needs a dozen passes and as many
(series x steps) buffers. The rate kernel does Prometheus's extrapolatedRate in its own order of IEEE operations
(promql/functions.go), so its floats are Prometheus's bit for bit. ``error_model="numpy"``: a float division by
zero gives inf/NaN, as in Go and numpy, instead of raising.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, error_model="numpy")
def grid_search(offsets, t, first, step, steps, right):
    """For series i and grid time ``first + k * step``: where it would be inserted in series i's slice of ``t``
    (searchsorted, side "right" if ``right`` else "left"), as a global index. int64 [series, steps]."""
    n = len(offsets) - 1
    out = np.empty((n, steps), np.int64)
    for i in range(n):
        p, b = offsets[i], offsets[i + 1]
        for k in range(steps):
            at = first + k * step
            if right:
                while p < b and t[p] <= at:
                    p += 1
            else:
                while p < b and t[p] < at:
                    p += 1
            out[i, k] = p
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def extrapolated_rate(t, v, lo, hi, range_end, range_ms, is_counter, is_rate, prometheus_3):
    """rate/increase/delta of every window [lo, hi): (values, has a value). Prometheus 3 stops a counter's
    extrapolation at zero after shortening a start too far from the first sample; 2.42 before."""
    n, steps = lo.shape
    out = np.zeros((n, steps))
    ok = np.zeros((n, steps), np.bool_)
    # resets[j]: counter resets (drops) among samples 1..j, so a window with none (nearly all) is O(1).
    resets = np.zeros(len(v), np.int64)
    for j in range(1, len(v)):
        resets[j] = resets[j - 1] + (1 if v[j] < v[j - 1] else 0)
    range_s = range_ms / 1000.0
    for i in range(n):
        for k in range(steps):
            a, b = lo[i, k], hi[i, k]
            if b - a < 2:
                continue
            v0, v1 = v[a], v[b - 1]
            t0, t1 = t[a], t[b - 1]
            result = v1 - v0
            if is_counter and resets[b - 1] != resets[a]:
                last = v0
                for j in range(a + 1, b):  # one by one, as Prometheus adds them
                    if v[j] < last:
                        result += last
                    last = v[j]
            start = range_end[k] - range_ms
            to_start = (t0 - start) / 1000.0
            to_end = (range_end[k] - t1) / 1000.0
            sampled = (t1 - t0) / 1000.0
            avg_gap = sampled / (b - a - 1)
            thresh = avg_gap * 1.1
            half_gap = avg_gap / 2
            if prometheus_3 and not to_start < thresh:
                to_start = half_gap
            if is_counter and result > 0 and v0 >= 0:
                to_zero = sampled * (v0 / result)
                if to_zero < to_start:
                    to_start = to_zero
            if not prometheus_3 and not to_start < thresh:
                to_start = half_gap
            if not to_end < thresh:
                to_end = half_gap
            factor = (sampled + to_start + to_end) / sampled
            if is_rate:
                factor /= range_s
            out[i, k] = factor * result
            ok[i, k] = True
    return out, ok
