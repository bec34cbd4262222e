"""Native histograms in the engine: selection, and the functions Prometheus 2.42 applies to them.

Floats keep their own fast path. A histogram selection reuses it: the histograms of the selected
series are loaded (``source.read_histograms``), decoded once, and the float selection machinery
(selectors.instant: lookback, staleness, all steps at once) runs on their *indexes* as values, a
stale histogram (sum = stale NaN) carrying the stale marker instead. The result is a ``HistSeries``:
a Series whose values index ``hists``. Functions then read counts and sums as numpy arrays over
those indexes; quantiles and fractions walk the buckets of each selected histogram.

Supported shapes (what 2.42 evaluates on histograms and we match): a vector selector at the top
of a query (the JSON ``histogram`` / ``histograms`` fields), and ``histogram_count``,
``histogram_sum``, ``histogram_fraction``, ``histogram_quantile`` of a vector selector.
Not yet: ``rate``/``increase``/``sum`` over histograms (2.42 adds and subtracts histograms of
different schemas; that needs bucket-merging arithmetic we have not written), histograms through
binary operators, subqueries and range-vector instant queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import promql_parser as pp

from ..model import STALE_NAN
from . import native, selectors
from .binary import dedupe
from .value import Series, drop_name


@dataclass
class HistSeries:
    series: Series  # values: indexes into hists (where mask)
    hists: list[native.FloatHistogram]

    def counts(self) -> np.ndarray:
        return np.array([h.count for h in self.hists], np.float64)

    def sums(self) -> np.ndarray:
        return np.array([h.sum for h in self.hists], np.float64)


def selector_of(node):
    """The vector selector a native-histogram evaluation can start from, or None."""
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    return node if isinstance(node, pp.VectorSelector) else None


def select(engine, node: "pp.VectorSelector", env) -> HistSeries | None:
    """Histograms of the selector at every step, or None when the source holds none there."""
    source = engine.source
    if not hasattr(source, "read_histograms"):
        return None
    ref = engine.ref_times(node, env)
    ms, start, end = engine.selector_window(node, env)
    ss = source.select_series(ms, start, end, env.ctx)
    if not len(ss):
        return None
    block = source.read_histograms(ss.ids, start, end, env.ctx)
    if not len(block):
        return None
    hists = [native.decode(b) for b in block.blob.to_pylist()]
    values = np.arange(len(hists), dtype=np.float64)
    stale = np.array([h.stale for h in hists], bool)
    values[stale] = STALE_NAN
    starts = np.concatenate([[0], np.flatnonzero(block.sid[1:] != block.sid[:-1]) + 1])
    offsets = np.concatenate([starts, [len(block)]]).astype(np.int64)
    by_sid = np.argsort(ss.ids, kind="stable")
    pos = by_sid[np.searchsorted(ss.ids, block.sid[starts], sorter=by_sid)]
    loaded = selectors.Loaded([ss.labels[i] for i in pos.tolist()], block.t, values, offsets,
                              np.argsort(pos, kind="stable"))
    env.ctx.charge_points(max(0, len(loaded.labels) * len(ref) - len(block.t)), "histogram selection")
    series = selectors.instant(loaded, ref, engine.lookback_ms)
    return HistSeries(series, hists) if len(series) else None


def _per_point(h: HistSeries, fn) -> Series:
    s = h.series
    out = np.zeros(s.values.shape)
    rows, cols = np.nonzero(s.mask)
    idx = s.values[rows, cols].astype(np.int64)
    out[rows, cols] = fn(idx, cols)
    return dedupe(Series([drop_name(lb) for lb in s.labels], out, s.mask.copy()))


def count(h: HistSeries) -> Series:
    counts = h.counts()
    return _per_point(h, lambda idx, _: counts[idx])


def total(h: HistSeries) -> Series:
    sums = h.sums()
    return _per_point(h, lambda idx, _: sums[idx])


def quantile(q: np.ndarray, h: HistSeries) -> Series:
    hists = h.hists
    return _per_point(h, lambda idx, cols: [native.quantile(float(q[c]), hists[i])
                                            for i, c in zip(idx.tolist(), cols.tolist())])


def fraction(lower: np.ndarray, upper: np.ndarray, h: HistSeries) -> Series:
    hists = h.hists
    return _per_point(h, lambda idx, cols: [native.fraction(float(lower[c]), float(upper[c]), hists[i])
                                            for i, c in zip(idx.tolist(), cols.tolist())])


def top_level(engine, node, env) -> HistSeries | None:
    """Histograms a query's result shows: only when the whole query is a vector selector."""
    sel = selector_of(node)
    return select(engine, sel, env) if sel is not None else None


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
