"""Native histogram values inside the engine, and what reads them point by point.

A ``HistSeries`` is a Series whose values index ``hists`` (stored histograms, decoded on demand, or
computed ones); a ``HistRanges`` is a range vector whose samples index them likewise. The functions
here turn them into float Series (histogram_count/sum/quantile/fraction, and presence for count,
group, count_over_time...) or into the points a result renders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import annotations, native, native_quantile3
from .binary import dedupe
from .format import format_g
from .value import Ranges, Series, drop_name, drop_names


class Joined:
    """Two lists of histograms seen as one (``b``'s indexes after ``a``'s), without decoding either."""

    def __init__(self, a, b) -> None:
        self.a, self.b = a, b

    def __len__(self) -> int:
        return len(self.a) + len(self.b)

    def __getitem__(self, i: int) -> "native.FloatHistogram":
        return self.a[i] if i < len(self.a) else self.b[i - len(self.a)]


@dataclass
class HistSeries:
    series: Series  # values: indexes into hists (where mask)
    hists: "native.Decoded | Joined | list[native.FloatHistogram]"  # stored ones, or computed ones

    def counts(self, idx: np.ndarray) -> np.ndarray:
        if isinstance(self.hists, native.Decoded):
            return self.hists.counts(idx.tolist())
        return np.array([self.hists[i].count for i in idx.tolist()], np.float64)

    def sums(self, idx: np.ndarray) -> np.ndarray:
        if isinstance(self.hists, native.Decoded):
            return self.hists.sums(idx.tolist())
        return np.array([self.hists[i].sum for i in idx.tolist()], np.float64)


@dataclass
class HistRanges:
    ranges: Ranges  # v: indexes into hists
    hists: "native.Decoded | list[native.FloatHistogram]"


def _per_point(h: HistSeries, fn) -> Series:
    s = h.series
    out = np.zeros(s.values.shape)
    rows, cols = np.nonzero(s.mask)
    idx = s.values[rows, cols].astype(np.int64)
    out[rows, cols] = fn(idx, cols)
    return dedupe(Series(drop_names(s.labels), out, s.mask.copy()))


def count(h: HistSeries) -> Series:
    return _per_point(h, lambda idx, _: h.counts(idx))


def total(h: HistSeries) -> Series:
    return _per_point(h, lambda idx, _: h.sums(idx))


def mean(h: HistSeries) -> Series:
    """histogram_avg (Prometheus 3): sum / count."""
    return _per_point(h, lambda idx, _: [native.go_div(s, c) for s, c in zip(h.sums(idx), h.counts(idx))])


def spread(h: HistSeries, stddev: bool) -> Series:
    """histogram_stdvar, or histogram_stddev (Prometheus 3)."""
    def one(i: int) -> float:
        v = native.variance(h.hists[i])
        if not stddev:
            return v
        return math.sqrt(v) if v >= 0 else math.nan  # Go's Sqrt: NaN below 0, where Python raises

    return _per_point(h, lambda idx, _: [one(i) for i in idx.tolist()])


def quantile(q: np.ndarray, h: HistSeries, prometheus_3: bool, annotate) -> Series:
    """histogram_quantile: Prometheus 3's interpolation (native_quantile3.py), or 2.42's."""
    hists, of = h.hists, native_quantile3.quantile if prometheus_3 else native.quantile
    out = _per_point(h, lambda idx, cols: [of(float(q[c]), hists[i]) for i, c in zip(idx.tolist(), cols.tolist())])
    if prometheus_3:
        for name, hist, value, k in _with_nan_observations(h):
            if math.isnan(out.values[out.labels.index(drop_name(name[1])), k]) and 0 <= q[k] <= 1:
                annotate(annotations.quantile_nan_result(name[0]))
            elif _in_buckets(hist) < hist.count:
                annotate(annotations.quantile_nan_skew(name[0]))
    return out


def _with_nan_observations(h: HistSeries):
    """(name and labels, histogram, its index, step) of each point whose sum is NaN: it observed NaNs."""
    s = h.series
    rows, cols = np.nonzero(s.mask)
    idx = s.values[rows, cols].astype(np.int64)
    for i, k, j in zip(rows.tolist(), cols.tolist(), idx.tolist()):
        hist = h.hists[j]
        if math.isnan(hist.sum):
            yield (dict(s.labels[i]).get("__name__", ""), s.labels[i]), hist, j, k


def _in_buckets(h: "native.FloatHistogram") -> float:
    return sum(b[4] for b in native.all_buckets(h))


def fraction(lower: np.ndarray, upper: np.ndarray, h: HistSeries, prometheus_3: bool, annotate) -> Series:
    """histogram_fraction: Prometheus 3's interpolation (native_quantile3.py), or 2.42's."""
    hists, of = h.hists, native_quantile3.fraction if prometheus_3 else native.fraction
    if prometheus_3:
        for name, hist, _, _ in _with_nan_observations(h):
            if _in_buckets(hist) < hist.count:
                annotate(annotations.fraction_nans(name[0]))
    return _per_point(h, lambda idx, cols: [of(float(lower[c]), float(upper[c]), hists[i])
                                            for i, c in zip(idx.tolist(), cols.tolist())])


def build(cells, labels, shape, make) -> HistSeries | None:
    """A HistSeries of ``make(index, row, step)`` at each cell (rows, steps) that has one."""
    rows, cols, idx = cells
    values = np.zeros(shape)
    out: list[native.FloatHistogram] = []
    for i, k, j in zip(rows.tolist(), cols.tolist(), idx.tolist()):
        values[i, k] = len(out)
        out.append(make(j, i, k))
    mask = np.zeros(shape, bool)
    mask[rows, cols] = True
    series = dedupe(Series(labels, values, mask))
    return HistSeries(series, out) if out else None


def cells(s: Series):
    """The (rows, steps, histogram indexes) of a HistSeries' points."""
    rows, cols = np.nonzero(s.mask)
    return rows, cols, s.values[rows, cols].astype(np.int64)


def with_histogram_points(floats: Series, h: HistSeries) -> Series:
    """A float vector with the histogram points added as present points of value 0 (for count,
    group and absent, which look at presence only)."""
    s = h.series
    return Series(floats.labels + s.labels, np.concatenate([floats.values, np.zeros(s.values.shape)]),
                  np.concatenate([floats.mask, s.mask]))


def vector_points(h: HistSeries) -> tuple[list, list]:
    """An instant query's histogram samples: (labels, histograms), in label order."""
    s = h.series
    rows = np.flatnonzero(s.mask[:, 0])
    return [s.labels[i] for i in rows], [h.hists[int(s.values[i, 0])] for i in rows]


def matrix_rows(h: HistSeries, steps: np.ndarray) -> list:
    """A range query's histogram points per series: (labels, t_ms, histograms), in label order."""
    s = h.series
    out = []
    for i in sorted(range(len(s)), key=lambda i: s.labels[i]):
        cols = np.flatnonzero(s.mask[i])
        if len(cols):
            out.append((s.labels[i], steps[cols], [h.hists[int(k)] for k in s.values[i, cols]]))
    return out


def range_rows(h: HistRanges) -> list:
    """An instant query of a range selector: each series' histograms in its window (labels, t_ms,
    histograms), in label order (the Ranges' rows already are)."""
    r = h.ranges
    out = []
    for i, labels in enumerate(r.labels):
        a, b = int(r.lo[i, 0]), int(r.hi[i, 0])
        if b > a:
            out.append((labels, r.t[a:b], [h.hists[int(j)] for j in r.v[a:b]]))
    return out


def text(h: "native.FloatHistogram") -> str:
    """A histogram as Prometheus 3's FloatHistogram.String() writes it (count_values' label value): count and sum,
    then each non-empty bucket from the lowest up, ``(lower,upper]:count`` with the bracket of an inclusive bound,
    e.g. ``{count:20, sum:10, [-2,-1):2, [-0.001,0.001]:2, (1,2]:2}``."""
    custom = h.schema == native.CUSTOM_BUCKETS_SCHEMA

    def upper(idx: int) -> float:
        if not custom:
            return native.bound(idx, h.schema)
        if idx < 0:
            return -math.inf
        return h.custom_values[idx] if idx < len(h.custom_values) else math.inf

    def bucket(lower: float, up: float, lower_in: bool, upper_in: bool, c: float) -> str:
        return (f"{'[' if lower_in else '('}{format_g(lower)},{format_g(up)}{']' if upper_in else ')'}"
                f":{format_g(c)}")

    parts = [f"count:{format_g(h.count)}", f"sum:{format_g(h.sum)}"]
    negative = [(idx, c) for idx, c in zip(native.bucket_indexes(h.neg_spans), h.neg) if c != 0]
    for idx, c in reversed(negative):
        lo, up = -upper(idx), -upper(idx - 1)
        parts.append(bucket(lo, up, idx == 0 if custom else lo < 0, True if custom else up > 0, c))
    if h.zero_count != 0:
        parts.append(bucket(-h.zero_threshold, h.zero_threshold, True, True, h.zero_count))
    for idx, c in zip(native.bucket_indexes(h.pos_spans), h.pos):
        if c != 0:
            lo, up = upper(idx - 1), upper(idx)
            parts.append(bucket(lo, up, idx == 0 if custom else lo < 0, True if custom else up > 0, c))
    return "{" + ", ".join(parts) + "}"
