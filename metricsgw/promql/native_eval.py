"""Native histograms in the engine: selection, rate/increase/delta, sum, and the histogram
functions, as Prometheus 2.42 evaluates them on histogram samples.

Floats keep their own fast path. A histogram selection reuses it: the histograms of the selected
series are loaded (``source.read_histograms``), decoded once, and the float selection machinery
(selectors.instant / selectors.ranges: lookback, staleness, windows, all steps at once) runs on
their *indexes* as values, a stale histogram (sum = stale NaN) carrying the stale marker instead.
The result is a ``HistSeries``: a Series whose values index ``hists``. Counts and sums are then
numpy arrays over those indexes; quantiles, fractions, rates and sums work histogram by histogram
on their few buckets (native_math.py), a Python loop per selected point.

``evaluate`` is a second, narrow evaluator beside the float one: it answers for the shapes 2.42
evaluates on histograms -- a vector selector, rate/increase/delta of a matrix selector, sum
(by/without) of those -- and None for anything else, which then has no histogram part. The float
evaluator runs as before; a result shows both (a series' float points and histogram points, as
Prometheus renders a series holding both).
count and group (engine.aggregate) add the histogram points of their argument to the float ones.
Not done: histograms through binary operators, subqueries, other aggregations, functions other
than those here, range-vector (``x[5m]``) instant queries, and a sum group mixing float and histogram
samples (2.42 drops it; here the float and the histogram result both appear).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import promql_parser as pp

from ..errors import ExecError
from ..model import METRIC_NAME, STALE_NAN
from . import native, native_math, parser, selectors
from . import rangefuncs as R
from .aggregations import group_ids
from .binary import dedupe
from .value import Series, drop_name


@dataclass
class HistSeries:
    series: Series  # values: indexes into hists (where mask)
    hists: "native.Decoded | list[native.FloatHistogram]"  # stored ones, or computed ones

    def counts(self, idx: np.ndarray) -> np.ndarray:
        if isinstance(self.hists, native.Decoded):
            return self.hists.counts(idx.tolist())
        return np.array([self.hists[i].count for i in idx.tolist()], np.float64)

    def sums(self, idx: np.ndarray) -> np.ndarray:
        if isinstance(self.hists, native.Decoded):
            return self.hists.sums(idx.tolist())
        return np.array([self.hists[i].sum for i in idx.tolist()], np.float64)


def _load(engine, ms, start: int, end: int, env) -> tuple[selectors.Loaded, list] | None:
    source = engine.source
    if not hasattr(source, "histogram_metrics"):
        return None
    names = [m for m in ms if m.name == METRIC_NAME]
    # A source over peers knows their histogram metrics only once asked for this selection.
    held = (source.histogram_metrics_in(ms, start, end, env.ctx) if hasattr(source, "histogram_metrics_in")
            else source.histogram_metrics())
    if not any(all(m.matches(name) for m in names) for name in held):
        return None  # no metric of the selector has histograms: no second series selection for floats
    ss = source.select_series(ms, start, end, env.ctx)
    if not len(ss):
        return None
    block = source.read_histograms(ss.ids, start, end, env.ctx)
    if not len(block):
        return None
    hists = native.Decoded(block.blob.to_pylist())
    values = np.arange(len(hists), dtype=np.float64)
    values[hists.stale()] = STALE_NAN
    starts = np.concatenate([[0], np.flatnonzero(block.sid[1:] != block.sid[:-1]) + 1])
    offsets = np.concatenate([starts, [len(block)]]).astype(np.int64)
    by_sid = np.argsort(ss.ids, kind="stable")
    pos = by_sid[np.searchsorted(ss.ids, block.sid[starts], sorter=by_sid)]
    return selectors.Loaded([ss.labels[i] for i in pos.tolist()], block.t, values, offsets,
                            np.argsort(pos, kind="stable")), hists


def select(engine, node: "pp.VectorSelector", env) -> HistSeries | None:
    """Histograms of the selector at every step, or None when the source holds none there."""
    ref = engine.ref_times(node, env)
    ms, start, end = engine.selector_window(node, env)
    got = _load(engine, ms, start, end, env)
    if got is None:
        return None
    loaded, hists = got
    env.ctx.charge_points(max(0, len(loaded.labels) * len(ref) - len(loaded.t)), "histogram selection")
    series = selectors.instant(loaded, ref, engine.lookback_ms)
    return HistSeries(series, hists) if len(series) else None


RATES = {"rate": (True, True), "increase": (True, False), "delta": (False, False)}


def rate(engine, node: "pp.Call", env) -> HistSeries | None:
    """rate/increase/delta over histograms: histogramRate of each window, extrapolated as floats
    are (extrapolatedRate, without the stop at zero, which 2.42 skips for histograms)."""
    is_counter, is_rate = RATES[node.func.name]
    msel = parser.unwrap(node.args[0])
    if not isinstance(msel, pp.MatrixSelector):
        return None
    ref = engine.ref_times(msel.vector_selector, env)
    ms, start, end = engine.selector_window(msel, env)
    got = _load(engine, ms, start, end, env)
    if got is None:
        return None
    loaded, hists = got
    r = selectors.ranges(loaded.without_stale(), ref, parser.duration_ms(msel.range))
    n = r.hi - r.lo
    ok = n >= 2
    last = max(len(r.t) - 1, 0)
    factor = R.extrapolation_factor(r, n, r.t[np.minimum(r.lo, last)], r.t[np.clip(r.hi - 1, 0, last)], is_rate)
    arith: dict[int, native_math.Hist] = {}

    def hist(j: int) -> native_math.Hist:
        h = arith.get(j)
        if h is None:
            h = arith[j] = native_math.Hist.of(hists[j])
        return h

    reset_at: dict[int, bool] = {}  # sample position p -> a reset between samples p - 1 and p

    def resets(lo: int, hi: int) -> list[bool]:
        out = []
        for p in range(lo + 1, hi):
            got = reset_at.get(p)
            if got is None:
                got = reset_at[p] = native_math.detect_reset(hist(int(r.v[p])), hist(int(r.v[p - 1])))
            out.append(got)
        return out

    out: list[native.FloatHistogram] = []
    values = np.zeros(n.shape)
    for i, k in zip(*np.nonzero(ok)):
        lo, hi = int(r.lo[i, k]), int(r.hi[i, k])
        window = r.v[lo:hi].astype(np.int64).tolist()
        h = native_math.histogram_rate([hist(j) for j in window], is_counter, resets(lo, hi) if is_counter else None)
        values[i, k] = len(out)
        out.append(native_math.scale(h, float(factor[i, k])).to_float_histogram())
    env.ctx.check("histogram rate")
    series = Series([drop_name(lb) for lb in r.labels], values, ok).compact()
    if len(set(series.labels)) != len(series.labels):
        raise ExecError("vector cannot contain metrics with the same labelset")
    return HistSeries(series, out) if len(series) else None


def total_by_group(engine, node: "pp.AggregateExpr", env) -> HistSeries | None:
    """sum (by/without) over histograms: added in series order, as 2.42's aggregation does."""
    inner = evaluate(engine, node.expr, env)
    if inner is None:
        return None
    without, names = parser.grouping(node)
    s = inner.series
    keys: dict = {}
    gid = group_ids(s.labels, without, names, keys)
    steps = s.values.shape[1]
    values = np.zeros((len(keys), steps))
    mask = np.zeros((len(keys), steps), bool)
    out: list[native.FloatHistogram] = []
    for k in range(steps):
        acc: dict[int, native_math.Hist] = {}
        for i in np.flatnonzero(s.mask[:, k]).tolist():
            g = int(gid[i])
            acc[g] = native_math.sum_into(acc.get(g), native_math.Hist.of(inner.hists[int(s.values[i, k])]))
        for g, h in acc.items():
            values[g, k], mask[g, k] = len(out), True
            out.append(h.to_float_histogram())
    return HistSeries(Series(list(keys), values, mask).compact(), out) if out else None


def evaluate(engine, node, env) -> HistSeries | None:
    """The histogram part of ``node``'s value, or None (no histograms, or a shape we leave to floats)."""
    node = parser.unwrap(node)
    if isinstance(node, pp.VectorSelector):
        return select(engine, node, env)
    if isinstance(node, pp.Call) and node.func.name in RATES:
        return rate(engine, node, env)
    if isinstance(node, pp.AggregateExpr) and parser.op_name(node).lower() == "sum":
        return total_by_group(engine, node, env)
    return None


def _per_point(h: HistSeries, fn) -> Series:
    s = h.series
    out = np.zeros(s.values.shape)
    rows, cols = np.nonzero(s.mask)
    idx = s.values[rows, cols].astype(np.int64)
    out[rows, cols] = fn(idx, cols)
    return dedupe(Series([drop_name(lb) for lb in s.labels], out, s.mask.copy()))


def count(h: HistSeries) -> Series:
    return _per_point(h, lambda idx, _: h.counts(idx))


def total(h: HistSeries) -> Series:
    return _per_point(h, lambda idx, _: h.sums(idx))


def quantile(q: np.ndarray, h: HistSeries) -> Series:
    hists = h.hists
    return _per_point(h, lambda idx, cols: [native.quantile(float(q[c]), hists[i])
                                            for i, c in zip(idx.tolist(), cols.tolist())])


def fraction(lower: np.ndarray, upper: np.ndarray, h: HistSeries) -> Series:
    hists = h.hists
    return _per_point(h, lambda idx, cols: [native.fraction(float(lower[c]), float(upper[c]), hists[i])
                                            for i, c in zip(idx.tolist(), cols.tolist())])


def with_histogram_points(floats: Series, h: HistSeries) -> Series:
    """A float vector with the histogram points added as present points of value 0 (for count and
    group, which look at presence only)."""
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
