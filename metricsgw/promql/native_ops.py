"""Operators over native histograms: arithmetic with scalars and between histograms, unary minus,
the set operators, sum and avg, sum/avg/last_over_time, and the sample counts of the *_over_time
functions.

Where Prometheus 2.42 and 3 agree (sum, histogram + histogram, and/or/unless, count_over_time,
present_over_time, subqueries), results are 2.42's bit for bit. Where 2.42 is wrong, Prometheus 3's
answer is given: 2.42 keeps a histogram unchanged by ``* 2``, ``/ 60`` or unary minus
(VectorscalarBinop sets only the float value), and answers ``histogram - histogram``, ``avg`` and
sum/avg/last_over_time as the float 0. Everything else that meets a histogram (comparisons, ``bool``,
``%``, ``^``, histogram * histogram, a histogram matched with a float sample) is refused
(NotSupported), where Prometheus 3 would drop the sample with an info annotation: an answer here is
right or an error.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ExecError, NotSupported
from . import (annotations, binary, compat, mixed_windows, native, native_binary3, native_math, native_trim, parser,
               reset_hints)
from . import rangefuncs as R
from .aggregations import group_ids
from .native_values import HistRanges, HistSeries, Joined, build, cells, with_histogram_points
from .value import Ranges, ScalarSteps, Series, drop_names


def _scalar_op(h: HistSeries, by: np.ndarray, divide: bool) -> HistSeries | None:
    s = h.series
    return build(cells(s), drop_names(s.labels), s.mask.shape,
                  lambda j, _, k: native_math.scaled(h.hists[j], float(by[k]), divide))


def negate(h) -> HistSeries | None:
    """Unary minus: every histogram multiplied by -1, the name dropped (Prometheus 3; 2.42 leaves it unchanged)."""
    if not isinstance(h, HistSeries):
        return None  # a range vector: the float evaluation refuses it
    return _scalar_op(h, np.full(h.series.mask.shape[1], -1.0), False)


def difference(a: "native.FloatHistogram", b: "native.FloatHistogram", annotate) -> "native.FloatHistogram":
    """a - b (Prometheus 3's Sub; the functions using it do not warn of conflicting counter resets)."""
    return _hist_op(a, b, "-", annotate)


def _hist_op(a: "native.FloatHistogram", b: "native.FloatHistogram", op: str, annotate) -> "native.FloatHistogram":
    left, right = native_math.Hist.of(a), native_math.Hist.of(b)
    operation = "addition" if op == "+" else "subtraction"
    if op == "+":  # 2.42: the histogram of the larger schema is added into the other
        h = native_math.sum_into(left, right)
    else:
        h = native_math.add(native_math.copy_to_schema(left, min(left.schema, right.schema)), right, -1.0)  # 3's Sub
    if h.reconciled:
        annotate(annotations.mismatched_custom_buckets(operation))
    out = native_math.compact(h).to_float_histogram() if op == "-" else h.to_float_histogram()
    # Add combines the hints; the engine makes a difference a gauge
    out.reset_hint = reset_hints.combined((a.reset_hint, b.reset_hint)) if op == "+" else reset_hints.GAUGE
    return out


def _binary_hist_op(a: "native.FloatHistogram", b: "native.FloatHistogram", op: str, annotate):
    """histogram + histogram, histogram - histogram as the engine's binary operator evaluates them: with its
    warning of conflicting counter resets (Prometheus 3)."""
    if reset_hints.conflict((a.reset_hint, b.reset_hint)):
        annotate(annotations.counter_reset_collision("addition" if op == "+" else "subtraction"))
    return _hist_op(a, b, op, annotate)


def operate(engine, node, hl, hr, env) -> HistSeries | None:
    """The histogram part of a binary operation whose sides' histogram parts are ``hl``, ``hr``."""
    if hl is None and hr is None:
        return None
    if isinstance(hl, HistRanges) or isinstance(hr, HistRanges):
        return None  # a range vector operand: the float evaluation refuses the expression
    if id(node) in env.trims:
        return _trim(engine, node, hl, env)
    op = parser.op_name(node).lower()
    on, names, card, include = parser.matching(node)
    if op in binary.SETOPS:
        return _set_op(op, hl, hr, engine.eval(node.lhs, env), engine.eval(node.rhs, env), on, names)
    three = compat.prometheus_3(engine.promql_compat)
    # The float side facing a histogram side: a scalar to scale by, or floats to meet it.
    lf = engine.eval(node.lhs, env) if hr is not None else None
    rf = engine.eval(node.rhs, env) if hl is not None else None
    if parser.is_bool(node) or op not in ("+", "-", "*", "/"):
        if not three:
            raise NotSupported(f"the {op}{' bool' if parser.is_bool(node) else ''} operator over native histograms")
        return native_binary3.compare(node, op, hl, hr, lf, rf, env)
    if hl is not None and isinstance(rf, ScalarSteps):
        if op in ("*", "/"):
            return _scalar_op(hl, rf.values, op == "/")
        return _incompatible(three, "histogram", op, "float", env)
    if hr is not None and isinstance(lf, ScalarSteps):
        if op == "*":
            return _scalar_op(hr, lf.values, False)
        return _incompatible(three, "float", op, "histogram", env)
    parts = []
    for hist, floats, left in ((hl, rf, True), (hr, lf, False)):
        if hist is not None and isinstance(floats, Series) and \
                len(binary.vector_vector("and", hist.series, floats, on, names, "many-to-many", [], False)):
            if not three:  # 2.42 answers these with wrong numbers
                raise NotSupported(f"the {op} operator between native histograms and float samples")
            parts.append(native_binary3.with_floats(node, op, hist, floats, left, env))
    if hl is not None and hr is not None:
        parts.append(_histograms(node, op, hl, hr, three, env))
    return native_binary3.union(parts)


def _incompatible(three: bool, lhs: str, op: str, rhs: str, env) -> None:
    """A histogram meeting a number it cannot: Prometheus 3 drops it with an info annotation; refused under 2.x."""
    if not three:
        raise NotSupported(f"{lhs} {op} {rhs} (native histograms)")
    env.ctx.annotate(annotations.incompatible_types(lhs, op, rhs))


def _histograms(node, op: str, hl: HistSeries, hr: HistSeries, three: bool, env) -> HistSeries | None:
    """histogram op histogram: + and - as Prometheus 3 (2.42's sum for +); * and / give nothing in 3.x."""
    on, names, card, include = parser.matching(node)
    # Pair the two sides' histograms with the float matching: lhs index * n + rhs index, added.
    n = len(hr.hists)
    pairs = binary.vector_vector("+", Series(hl.series.labels, hl.series.values * n, hl.series.mask),
                                 hr.series, on, names, card, include, False)
    if not len(pairs) or not pairs.mask.any():
        return None
    if op not in ("+", "-"):
        return _incompatible(three, "histogram", op, "histogram", env)
    rows, cols, code = cells(pairs)
    notes = env.ctx.annotate if three else (lambda _: None)
    return build((rows, cols, code), pairs.labels, pairs.mask.shape,
                 lambda c, *_: _binary_hist_op(hl.hists[c // n], hr.hists[c % n], op, notes))


def _trim(engine, node, hl, env) -> HistSeries | None:
    """``h </ x``, ``h >/ x`` (native_trim.py), the name kept as a comparison keeps it; a float sample on
    the left is dropped (engine.py)."""
    if not isinstance(hl, HistSeries):
        return None
    by = engine.eval(node.rhs, env)
    upper = env.trims[id(node)] == parser.TRIM_UPPER
    if isinstance(by, ScalarSteps):
        return build(cells(hl.series), hl.series.labels, hl.series.mask.shape,
                      lambda j, _, k: native_trim.trim(hl.hists[j], float(by.values[k]), upper))
    if not isinstance(by, Series):
        return None
    # Each histogram with the float sample it matches: the matching run twice, once carrying the histograms'
    # indexes and once the floats (the same pairs, in the same order).
    on, names, card, include = parser.matching(node)
    s = hl.series
    index = binary.vector_vector("+", s, Series(by.labels, np.zeros_like(by.values), by.mask), on, names, card,
                                 include, False)
    value = binary.vector_vector("+", Series(s.labels, np.zeros_like(s.values), s.mask), by, on, names, card,
                                 include, False)
    labels = index.labels
    if not on:  # matched with ignoring(): the left-hand labels, name included, as a comparison keeps them
        row = {int(j): lb for lb, vals, mask in zip(s.labels, s.values, s.mask) for j in vals[mask]}
        labels = [row[int(vals[mask][0])] if mask.any() else lb for lb, vals, mask in
                  zip(index.labels, index.values, index.mask)]
    return build(cells(index), labels, index.mask.shape,
                  lambda j, i, k: native_trim.trim(hl.hists[j], float(value.values[i, k]), upper))


def _set_op(op: str, hl, hr, lf, rf, on: bool, names: list) -> HistSeries | None:
    """and/unless keep the left-hand histograms matched (not matched) by any right-hand sample;
    or adds the right-hand histograms no left-hand sample matches."""
    if not isinstance(lf, Series) or not isinstance(rf, Series):
        return None  # the float evaluation refuses a scalar operand
    if op in ("and", "unless"):
        if hl is None:
            return None
        res = binary.vector_vector(op, hl.series, rf if hr is None else with_histogram_points(rf, hr), on, names,
                                   "many-to-many", [], False)
        return HistSeries(res, hl.hists) if len(res) else None
    if hr is None:
        return hl
    rest = binary.vector_vector("unless", hr.series, lf if hl is None else with_histogram_points(lf, hl), on,
                                names, "many-to-many", [], False)
    if hl is None:
        return HistSeries(rest, hr.hists) if len(rest) else None
    shifted = Series(rest.labels, rest.values + len(hl.hists), rest.mask)
    return HistSeries(binary.vector_vector("or", hl.series, shifted, on, names, "many-to-many", [], False),
                      Joined(hl.hists, hr.hists))


def set_operands(op: str, lf: Series, rf: Series, hl, hr, on: bool, names: list) -> tuple[Series, Series]:
    """The float operands of a set operator, so its float part sees the histogram samples too:
    the right-hand side's presence for and/unless; for or, the right-hand floats that no
    left-hand histogram matches."""
    if op in ("and", "unless"):
        return lf, rf if hr is None else with_histogram_points(rf, hr)
    if hl is None:
        return lf, rf
    return lf, binary.vector_vector("unless", rf, with_histogram_points(lf, hl), on, names, "many-to-many", [], False)


def total_by_group(inner, without: bool, names: list[str], mean: bool, annotate) -> HistSeries | None:
    """sum and avg (by/without) over histograms, each group's as ``_group_total`` makes it: 2.42's
    (``annotate`` None) or Prometheus 3's."""
    if not isinstance(inner, HistSeries):
        return None
    s = inner.series
    keys: dict = {}
    gid = group_ids(s.labels, without, names, keys)
    steps = s.values.shape[1]
    values = np.zeros((len(keys), steps))
    mask = np.zeros((len(keys), steps), bool)
    out: list[native.FloatHistogram] = []
    for k in range(steps):
        members: dict[int, list] = {}
        for i in np.flatnonzero(s.mask[:, k]).tolist():
            members.setdefault(int(gid[i]), []).append(inner.hists[int(s.values[i, k])])
        for g, hists in members.items():
            total = _group_total(hists, mean, annotate)
            if total is not None:
                values[g, k], mask[g, k] = len(out), True
                out.append(total)
    return HistSeries(Series(list(keys), values, mask).compact(), out) if out else None


def _group_total(hists: list, mean: bool, annotate) -> "native.FloatHistogram | None":
    """One group's sum or avg: 2.42's plain additions (``annotate`` None), or Prometheus 3's compensated ones,
    with its annotations (a group mixing exponential and custom buckets is left out)."""
    arith = [native_math.Hist.of(h) for h in hists]
    if annotate is None:
        acc = None
        for h in arith:
            acc = native_math.sum_into(acc, h)
        total = acc.to_float_histogram()
        return native_math.scaled(total, float(len(hists)), True) if mean else total
    try:
        acc = native_math.compensated_sum(arith, float(len(hists)) if mean else 1.0)
    except native_math.MixedBuckets:
        annotate(annotations.mixed_exponential_custom(""))
        return None
    if acc.reconciled:
        annotate(annotations.mismatched_custom_buckets("aggregation"))
    return _with_hints(acc.to_float_histogram(), hists, annotate)


def _with_hints(total: "native.FloatHistogram", inputs: list, annotate) -> "native.FloatHistogram":
    """A sum's (or mean's) counter reset hint from its inputs', and Prometheus 3's warning of a conflict."""
    hints = [h.reset_hint for h in inputs]
    if reset_hints.conflict(hints):
        annotate(annotations.counter_reset_collision("aggregation"))
    total.reset_hint = reset_hints.combined(hints)
    return total


def sum_over_time(h, mean: bool, annotate) -> HistSeries | None:
    """sum_over_time / avg_over_time of histograms (Prometheus 3; 2.42 answers the float 0): each window's
    histograms added with Prometheus 3's compensation (native_math.compensated_sum), avg each divided by
    their number first."""
    if not isinstance(h, HistRanges):
        return None
    r = h.ranges
    ok = r.hi > r.lo
    rows, cols = np.nonzero(ok)
    arith: dict[int, native_math.Hist] = {}

    def window(i: int, k: int) -> "native.FloatHistogram":
        indexes = r.v[r.lo[i, k]:r.hi[i, k]].astype(np.int64).tolist()
        points = []
        for j in indexes:
            if j not in arith:
                arith[j] = native_math.Hist.of(h.hists[j])
            points.append(arith[j])
        acc = native_math.compensated_sum(points, float(len(points)) if mean else 1.0)
        if acc.reconciled:
            annotate(annotations.mismatched_custom_buckets("aggregation"))
        return _with_hints(native_math.compact(acc).to_float_histogram(), [h.hists[j] for j in indexes], annotate)

    labels = drop_names(r.labels)
    present = [labels[i] for i in np.flatnonzero(ok.any(axis=1))]
    if len(set(present)) != len(present):  # as the float range functions (calls._dedupe_whole)
        raise ExecError("vector cannot contain metrics with the same labelset")
    return build((rows, cols, rows), labels, ok.shape, lambda _, i, k: window(i, k))


def end_over_time(h, last: bool) -> HistSeries | None:
    """The last (first) histogram of each window: last_over_time / first_over_time, keeping the metric name."""
    if not isinstance(h, HistRanges):
        return None
    r = h.ranges
    ok = r.hi > r.lo
    at = np.maximum(r.hi - 1, 0) if last else np.minimum(r.lo, max(len(r.v) - 1, 0))
    values = np.where(ok, r.v[at] if len(r.v) else 0.0, 0.0)
    return HistSeries(Series(list(r.labels), values, ok).compact(), h.hists) if ok.any() else None


def times_over_time(floats: Ranges, h: HistRanges, last: bool) -> Series:
    """ts_of_last_over_time / ts_of_first_over_time over float and histogram samples alike (Prometheus 3): the
    time in seconds of each window's last (first) sample of either kind."""
    times: dict = {}
    for r in (floats, h.ranges):
        n = r.hi - r.lo
        if len(r.t):
            at = np.take(r.t, np.clip(r.hi - 1 if last else r.lo, 0, len(r.t) - 1))
        else:
            at = np.zeros(n.shape, np.int64)
        at = np.where(n > 0, at, np.iinfo(np.int64).min if last else np.iinfo(np.int64).max)
        for i, lb in enumerate(r.labels):
            times[lb] = (np.maximum if last else np.minimum)(times[lb], at[i]) if lb in times else at[i]
    labels = list(times)
    t = np.array([times[lb] for lb in labels], np.int64).reshape(len(labels), len(floats.range_end))
    mask = (t != np.iinfo(np.int64).min) & (t != np.iinfo(np.int64).max)
    out = Series(drop_names(labels), np.where(mask, t / 1000.0, 0.0), mask).compact()
    if len(set(out.labels)) != len(out.labels):
        raise ExecError("vector cannot contain metrics with the same labelset")
    return out


def _present(v: Ranges | Series) -> np.ndarray:
    return v.hi > v.lo if isinstance(v, Ranges) else v.mask


def refuse_mixed(floats: Ranges | Series, hists: Ranges | Series, what: str) -> None:
    """A window (or a group) holding both float and histogram samples of one series at one step is
    refused (which one is last, or how to add them, is not worked out here)."""
    rows = {lb: i for i, lb in enumerate(floats.labels)}
    for j, lb in enumerate(hists.labels):
        i = rows.get(lb)
        if i is not None and (_present(floats)[i] & _present(hists)[j]).any():
            raise NotSupported(f"{what} mixing float and native histogram samples")


def points_over_time(floats: Ranges, h: HistRanges, present: bool) -> Series:
    """count_over_time / present_over_time counting float and histogram samples alike (2.42)."""
    counts: dict = {}
    for r in (floats, h.ranges):
        for i, lb in enumerate(r.labels):
            n = r.hi[i] - r.lo[i]
            counts[lb] = counts[lb] + n if lb in counts else n
    labels = list(counts)
    n = np.array([counts[lb] for lb in labels], np.float64).reshape(len(labels), len(floats.range_end))
    mask = n > 0
    values = np.where(mask, 1.0, 0.0) if present else n
    out = Series(drop_names(labels), values, mask).compact()
    if len(set(out.labels)) != len(out.labels):
        raise ExecError("vector cannot contain metrics with the same labelset")
    return out


def pairs_over_time(floats: Ranges, h: HistRanges, resets: bool) -> Series:
    """resets() / changes() of series holding histograms (Prometheus 3): a pair of consecutive histograms
    counts when the later is a counter reset of the earlier (detect_reset) / differs from it; float series
    as ``rangefuncs`` counts them; a window holding both kinds of one series, over both in time order
    (mixed_windows)."""
    def flagged(a, b) -> bool:
        if resets:
            return native_math.detect_reset(native_math.Hist.of(b), native_math.Hist.of(a))
        return _layout_and_counts(a) != _layout_and_counts(b)

    mixed = mixed_windows.pair_counts(floats, h, resets, flagged)
    r = h.ranges
    if mixed:  # the histogram part leaves those windows to the mixed count
        hi = r.hi.copy()
        for _, j, k in mixed_windows.cells(floats, h):
            hi[j, k] = r.lo[j, k]
        r = dataclasses.replace(r, hi=hi)
    idx = r.v.astype(np.int64).tolist()
    flags = np.zeros(len(idx), bool)
    for p in range(1, len(idx)):  # pairs across two series are not counted (pairs_flagged)
        flags[p] = flagged(h.hists[idx[p - 1]], h.hists[idx[p]])
    float_part = R.resets(floats) if resets else R.changes(floats)
    out = _merged(float_part, R.pairs_flagged(r, flags))
    if not mixed:
        return out
    values = np.zeros((len(floats), len(floats.range_end)))
    mask = np.zeros(values.shape, bool)
    for (i, k), n in mixed.items():
        values[i, k], mask[i, k] = n, True
    return _merged(out, Series(drop_names(floats.labels), values, mask).compact())


def _layout_and_counts(h: "native.FloatHistogram") -> tuple:
    """What FloatHistogram.Equals compares (the NaN sum of a histogram that observed NaN equals itself)."""
    x = native_math.compact(native_math.Hist.of(h))
    return (x.schema, x.zero_threshold, x.zero_count, x.count, repr(x.sum), tuple(x.pos.items()),
            tuple(x.neg.items()), x.custom_values)


def _merged(a: Series, b: Series) -> Series:
    """Two results whose series may coincide (a series that is float at some steps, histograms at others)."""
    rows: dict = {}
    for s in (a, b):
        for i, lb in enumerate(s.labels):
            if lb in rows:
                v, m = rows[lb]
                rows[lb] = (np.where(s.mask[i], s.values[i], v), m | s.mask[i])
            else:
                rows[lb] = (s.values[i], s.mask[i])
    if not rows:
        return a
    labels = list(rows)
    return Series(labels, np.array([rows[lb][0] for lb in labels]), np.array([rows[lb][1] for lb in labels]))
