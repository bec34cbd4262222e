"""Prometheus 3's binary operators where a histogram meets a float sample, and its comparisons of
histograms (vectorElemBinop of 3.14); native_ops.operate hands these over when answering as 3.x. Under 2.x
they stay refused: 2.42's answers there are wrong numbers.

A histogram times a float (either side) or divided by one is scaled. ``histogram == histogram`` keeps the
left-hand one where the two are equal, ``!=`` where they differ. Any other pairing of a histogram with a float,
or of two histograms, gives nothing, with an info annotation naming the operator and the sample types."""

from __future__ import annotations

import numpy as np

from . import annotations, binary, native, native_math, parser
from .native_values import HistSeries, build
from .value import Series


def pair_with_floats(node, hist: HistSeries, floats: Series, hist_left: bool) -> tuple[Series, Series]:
    """Each histogram with the float sample it matches, as the operator's matching pairs them: the matching
    run twice, once carrying the histograms' indexes and once the floats (the same pairs, in the same order)."""
    on, names, card, include = parser.matching(node)
    s = hist.series

    def zeros(x: Series) -> Series:
        return Series(x.labels, np.zeros_like(x.values), x.mask)

    def sides(a: Series, b: Series) -> tuple[Series, Series]:
        return (a, b) if hist_left else (b, a)

    index = binary.vector_vector("+", *sides(s, zeros(floats)), on, names, card, include, False)
    value = binary.vector_vector("+", *sides(zeros(s), floats), on, names, card, include, False)
    return index, value


def with_floats(node, op: str, hist: HistSeries, floats: Series, hist_left: bool, env) -> HistSeries | None:
    """``hist op floats`` (``floats op hist`` unless ``hist_left``), for the pairs the matching makes."""
    index, value = pair_with_floats(node, hist, floats, hist_left)
    if not index.mask.any():
        return None
    if op == "*" or (op == "/" and hist_left):
        rows, cols = np.nonzero(index.mask)
        cells = (rows, cols, index.values[rows, cols].astype(np.int64))
        return build(cells, index.labels, index.mask.shape,
                     lambda j, i, k: native_math.scaled(hist.hists[j], float(value.values[i, k]), op == "/"))
    kinds = ("histogram", "float") if hist_left else ("float", "histogram")
    env.ctx.annotate(annotations.incompatible_types(kinds[0], op, kinds[1]))
    return None


def compare(node, op: str, hl: HistSeries | None, hr: HistSeries | None, lf, rf, env) -> HistSeries | None:
    """A comparison meeting histograms: == and != between two histograms filter, anything else is dropped."""
    bool_ = parser.is_bool(node)
    if hl is not None and hr is not None and op in ("==", "!=") and not bool_:
        return _equality(node, op, hl, hr)
    if hl is not None and hr is not None and op in ("==", "!=") and bool_:
        return None  # a float answer: bool_equality, the float side's
    for hist, other, left in ((hl, rf, True), (hr, lf, False)):
        if hist is None:
            continue
        kind = "histogram" if (hr if left else hl) is not None else "float"
        if other is not None or kind == "histogram":
            sides = ("histogram", op, kind) if left else (kind, op, "histogram")
            env.ctx.annotate(annotations.incompatible_types(*sides))
    return None


def _compared(node, op: str, hl: HistSeries, hr: HistSeries, return_bool: bool):
    """The pairs of histograms the operator's matching makes: (their labels as the comparison gives them, the
    result's shape, rows, steps, the left histogram of each pair, whether the pair passes ``op``)."""
    on, names, card, include = parser.matching(node)
    n = len(hr.hists)
    pairs = binary.vector_vector("+", Series(hl.series.labels, hl.series.values * n, hl.series.mask), hr.series,
                                 on, names, card, include, False)
    # The labels a comparison gives the pairs (the same pairs: every value equal, so none filtered out).
    labels = binary.vector_vector("==", Series(hl.series.labels, np.zeros_like(hl.series.values), hl.series.mask),
                                  Series(hr.series.labels, np.zeros_like(hr.series.values), hr.series.mask),
                                  on, names, card, include, return_bool).labels
    rows, cols = np.nonzero(pairs.mask)
    code = pairs.values[rows, cols].astype(np.int64)
    same = np.array([_equal(hl.hists[c // n], hr.hists[c % n]) for c in code.tolist()], bool)
    return labels, pairs.mask.shape, rows, cols, code // n, same if op == "==" else ~same


def _equality(node, op: str, hl: HistSeries, hr: HistSeries) -> HistSeries | None:
    labels, shape, rows, cols, left, keep = _compared(node, op, hl, hr, False)
    if not keep.any():
        return None
    return build((rows[keep], cols[keep], left[keep]), labels, shape, lambda j, *_: hl.hists[j])


def bool_equality(node, op: str, hl: HistSeries, hr: HistSeries) -> Series:
    """``hl == bool hr`` / ``!= bool``: 1 or 0 for each matching pair of histograms (without the metric name)."""
    labels, shape, rows, cols, _, passes = _compared(node, op, hl, hr, True)
    values, mask = np.zeros(shape), np.zeros(shape, bool)
    values[rows, cols], mask[rows, cols] = passes, True
    return Series(labels, values, mask).compact()


def _equal(a: "native.FloatHistogram", b: "native.FloatHistogram") -> bool:
    """FloatHistogram.Equals over compacted histograms."""
    return native_math.same(native_math.Hist.of(a), native_math.Hist.of(b))


def union(parts: list[HistSeries | None]) -> HistSeries | None:
    """Histogram results of one operation's separate pairings, as one."""
    parts = [p for p in parts if p is not None]
    if len(parts) < 2:
        return parts[0] if parts else None
    labels, values, masks, hists = [], [], [], []
    for p in parts:
        labels += p.series.labels
        values.append(np.where(p.series.mask, p.series.values + len(hists), 0.0))
        masks.append(p.series.mask)
        hists += [p.hists[i] for i in range(len(p.hists))]
    series = binary.dedupe(Series(labels, np.concatenate(values), np.concatenate(masks)))
    return HistSeries(series, hists)
