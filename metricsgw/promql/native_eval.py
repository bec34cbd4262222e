"""Native histograms in the engine: the histogram part of every expression's value, as Prometheus
evaluates it on histogram samples (2.42, and Prometheus 3 where 2.42 is wrong: see native_ops.py).

Floats keep their own fast path. A histogram selection (native_select.py) reuses it: the histograms of the selected
series are loaded (``source.read_histograms``) and kept as their stored bytes (native.Decoded: each is parsed
when a step touches it, its count, sum and reset hint read for all at once), and the float selection machinery
(selectors.instant / selectors.ranges: lookback, staleness, windows, all steps at once) runs on
their *indexes* as values, a stale histogram (sum = stale NaN) carrying the stale marker instead.
The result is a ``HistSeries`` (a Series whose values index ``hists``) or, for a range selector, a
``HistRanges``. Counts and sums are then numpy arrays over those indexes; quantiles, fractions,
rates and sums work histogram by histogram on their few buckets (native_math.py), a Python loop
per selected point.

``evaluate`` is a second evaluator beside the float one, and it is total: every node either has
its histogram part worked out here (selectors through native_select.py, subqueries, rate/increase/delta; in
native_ops.py sum/avg, sum/avg/last_over_time, binary operators, unary minus), or is one whose float evaluation
takes its argument's histograms into account itself (``CONSUMERS``, count/group: calls.py, engine.py), or is refused
(NotSupported, a 400) as soon as any of its arguments holds a histogram. So histograms are never
dropped silently: an answer is right or it is an error. The engine asks ``evaluate`` for the whole
query after the float evaluation; a result shows both parts (a series' float points and histogram
points, as Prometheus renders a series holding both).
Not done (refused): the other aggregations and functions, and a sum/avg group or a
last_over_time window mixing float and histogram samples.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import promql_parser as pp

from ..errors import BadData, ExecError, NotSupported
from . import (annotations, compat, limits, mixed_windows, native, native_binary3, native_columns, native_math,
               native_ops, native_select, parser, selectors)
from .binary import dedupe
from . import rangefuncs as R
from .aggregations import group_ids, group_sum
from .native_values import HistRanges, HistSeries
from . import functions as F
from .value import Ranges, ScalarSteps, Series, StringValue, drop_names

# Functions whose float evaluation (calls.py) reads their last argument's histogram part itself:
# the histogram_* functions, and those that count or time samples of any kind; histogram_quantiles reads
# its first.
CONSUMERS = {"histogram_count", "histogram_sum", "histogram_fraction", "histogram_quantile", "histogram_avg",
             "histogram_stddev", "histogram_stdvar", "count_over_time", "present_over_time", "absent",
             "absent_over_time", "timestamp", "ts_of_first_over_time", "ts_of_last_over_time"}
RATES = {"rate": (True, True), "increase": (True, False), "delta": (False, False)}
# Aggregations of floats only: Prometheus 3 leaves histogram samples out of them, with an info.
IGNORING_AGGREGATIONS = {"topk", "bottomk", "min", "max", "quantile", "stddev", "stdvar"}
# Functions of floats only, whose answer leaves histogram samples out in Prometheus 3 (2.42 answers them with a
# wrong number, so under 2.x they are refused).
FLOAT_ONLY = {"abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10", "sgn", "deg", "rad", "sin", "cos", "tan",
              "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "round", "clamp",
              "clamp_min", "clamp_max", "deriv", "predict_linear", "double_exponential_smoothing",
              "stddev_over_time", "stdvar_over_time", "quantile_over_time", "min_over_time", "max_over_time",
              "mad_over_time", "ts_of_min_over_time", "ts_of_max_over_time",
              "sort", "sort_desc", "scalar", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "hour",
              "minute", "month", "year"}


def subquery(engine, node: "pp.SubqueryExpr", env) -> HistRanges | None:
    """The inner query's histograms at the subquery's steps, as a range vector (2.42's subquery)."""
    ref, rng, grid = engine.subquery_grid(node, env)
    inner = evaluate(engine, node.expr, dataclasses.replace(env, steps=grid)) if len(grid) else None
    if not isinstance(inner, HistSeries):
        return None
    r = selectors.ranges(selectors.series_as_samples(inner.series, grid), ref, rng, engine.left_open)
    return HistRanges(r, inner.hists) if (r.hi > r.lo).any() else None


def rate(engine, node: "pp.Call", env) -> HistSeries | None:
    """rate/increase/delta over histograms: histogramRate of each window, extrapolated as floats are
    (extrapolatedRate; 2.42 does not stop a counter's extrapolation at zero for histograms, Prometheus 3 does,
    by their count). Prometheus 3 also warns of gauge histograms in rate and counters in delta, and drops a
    window mixing exponential and custom buckets with a warning."""
    is_counter, is_rate = RATES[node.func.name]
    three = compat.prometheus_3(engine.promql_compat)
    got = _settled(engine, node, env)
    if not isinstance(got, HistRanges):
        return None
    r, hists = got.ranges, got.hists
    n = r.hi - r.lo
    ok = n >= 2
    last = max(len(r.t) - 1, 0)
    first_count, result_count = np.zeros(n.shape), np.zeros(n.shape)  # Prometheus 3's stop at zero needs them
    rows, cols = np.nonzero(ok)
    lo_w, hi_w = r.lo[rows, cols], r.hi[rows, cols]
    # windows of stored histograms of one layout as matrix rows; the others bucket dict by bucket dict
    columns = native_columns.WindowRates(hists, r.v) if isinstance(hists, native.Decoded) and len(rows) else None
    fast = columns.uniform(lo_w, hi_w) if columns is not None else np.zeros(len(rows), bool)
    if three and columns is not None:
        _warn_of_kinds(env, r, hists, lo_w[fast], hi_w[fast], rows[fast], is_counter)
    increases = columns.increase(lo_w[fast], hi_w[fast], is_counter, three) if fast.any() else []
    fast_at = np.flatnonzero(fast)
    for _, which, result, first in increases:
        at = fast_at[which]
        first_count[rows[at], cols[at]], result_count[rows[at], cols[at]] = first, result[:, native_columns.COUNT]
    raw = _dict_increases(env, r, hists, np.flatnonzero(~fast), rows, cols, ok, is_counter, three,
                          (first_count, result_count))
    factor = R.extrapolation_factor(r, n, r.t[np.minimum(r.lo, last)], r.t[np.clip(r.hi - 1, 0, last)], is_rate,
                                    (first_count, result_count) if three and is_counter else None, three)
    made: list[native.FloatHistogram | None] = [None] * len(rows)
    for number, which, result, _ in increases:
        at = fast_at[which]
        for w, h in zip(at.tolist(), columns.histograms(number, result, factor[rows[at], cols[at]])):
            made[w] = h
    for w, h in raw.items():
        made[w] = native_math.scale(h, float(factor[rows[w], cols[w]])).to_float_histogram()
        made[w].reset_hint = native.GAUGE  # histogramRate makes its result a gauge
    out = [h for h in made if h is not None]  # in (series, step) order, the dropped windows left out
    values = np.zeros(n.shape)
    kept = ok[rows, cols]
    values[rows[kept], cols[kept]] = np.arange(len(out))
    env.ctx.check("histogram rate")
    series = Series(drop_names(r.labels), values, ok).compact()
    if len(set(series.labels)) != len(series.labels):
        raise ExecError("vector cannot contain metrics with the same labelset")
    return HistSeries(series, out) if len(series) else None


def _dict_increases(env, r, hists, windows: np.ndarray, rows: np.ndarray, cols: np.ndarray, ok: np.ndarray,
                    is_counter: bool, three: bool, counts: tuple[np.ndarray, np.ndarray]) -> dict:
    """histogramRate of each window of ``windows`` (numbers into rows/cols) on native_math's bucket dicts: window
    number -> its increase, not yet extrapolated; its first histogram's count and the increase's in ``counts``.
    Prometheus 3 drops (``ok`` False) a window mixing exponential and custom buckets, with a warning."""
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

    # Prometheus 3 tells of custom bounds intersected to take one histogram from another (or add it back)
    reconciled = (lambda op: env.ctx.annotate(annotations.mismatched_custom_buckets(op))) if three else None
    raw: dict[int, native_math.Hist] = {}
    for w in windows.tolist():
        i, k = int(rows[w]), int(cols[w])
        lo, hi = int(r.lo[i, k]), int(r.hi[i, k])
        window = r.v[lo:hi].astype(np.int64).tolist()
        if three:
            _warn_of_kind(env, r.labels[i], [hists[j] for j in window], is_counter)
        try:
            h = native_math.histogram_rate([hist(j) for j in window], is_counter,
                                           resets(lo, hi) if is_counter else None, null_first_reset=three,
                                           reconciled=reconciled)
        except native_math.MixedBuckets:
            if not three:
                raise
            env.ctx.annotate(annotations.mixed_exponential_custom(dict(r.labels[i]).get("__name__", "")))
            ok[i, k] = False
            continue
        counts[0][i, k], counts[1][i, k] = hist(window[0]).count, h.count
        raw[w] = h
    return raw


def _warn_of_kinds(env, r, hists: native.Decoded, lo: np.ndarray, hi: np.ndarray, rows: np.ndarray,
                   is_counter: bool) -> None:
    """_warn_of_kind for many windows [lo, hi) of stored histograms at once, from their reset hints."""
    if not len(lo):
        return
    gauge = hists.hints(r.v.astype(np.int64)) == native.GAUGE
    if is_counter:
        seen = np.concatenate([[0], np.cumsum(gauge)])
        wrong = seen[hi] > seen[lo]
    else:
        wrong = ~gauge[lo] | ~gauge[hi - 1]
    for i in np.unique(rows[wrong]).tolist():
        name = dict(r.labels[i]).get("__name__", "")
        env.ctx.annotate(annotations.not_counter(name) if is_counter else annotations.not_gauge(name))


def _warn_of_kind(env, labels, window: list, is_counter: bool) -> None:
    """Prometheus 3's warnings of a gauge histogram under rate/increase, of a counter one under delta."""
    name = dict(labels).get("__name__", "")
    if is_counter and any(h.reset_hint == native.GAUGE for h in window):
        env.ctx.annotate(annotations.not_counter(name))
    elif not is_counter and (window[0].reset_hint != native.GAUGE or window[-1].reset_hint != native.GAUGE):
        env.ctx.annotate(annotations.not_gauge(name))


def instant_rate(engine, node: "pp.Call", env) -> HistSeries | None:
    """irate / idelta over histograms (Prometheus 3's instantValue): the last histogram of each window less the
    one before (irate: the last one itself after a counter reset), irate's per second; a gauge histogram."""
    is_rate = node.func.name == "irate"
    got = _settled(engine, node, env)
    if not isinstance(got, HistRanges):
        return None
    r, hists = got.ranges, got.hists
    ok = (r.hi - r.lo) >= 2
    values = np.zeros(ok.shape)
    out: list[native.FloatHistogram] = []
    for i, k in zip(*np.nonzero(ok)):
        p = int(r.hi[i, k]) - 1
        last, prev = hists[int(r.v[p])], hists[int(r.v[p - 1])]
        seconds = (int(r.t[p]) - int(r.t[p - 1])) / 1000
        _warn_of_kind(env, r.labels[i], [prev, last], is_rate)
        try:
            if is_rate and native_math.detect_reset(native_math.Hist.of(last), native_math.Hist.of(prev)):
                h = last
            else:
                h = native_ops.difference(last, prev, env.ctx.annotate)
        except native_math.MixedBuckets:
            env.ctx.annotate(annotations.mixed_exponential_custom(dict(r.labels[i]).get("__name__", "")))
            h = None
        if h is None or seconds == 0:
            ok[i, k] = False
            continue
        values[i, k] = len(out)
        h = dataclasses.replace(h, reset_hint=native.GAUGE, buckets=None)
        out.append(native_math.scaled(h, seconds, True) if is_rate else h)
    series = Series(drop_names(r.labels), values, ok).compact()
    if len(set(series.labels)) != len(series.labels):
        raise ExecError("vector cannot contain metrics with the same labelset")
    return HistSeries(series, out) if len(series) else None


def relabeled(engine, node: "pp.Call", env) -> HistSeries | None:
    """label_replace / label_join of histogram samples (Prometheus 3 relabels every sample; 2.42 turned each into
    the float 0): their label sets changed as calls.py changes the float samples'."""
    hist = evaluate(engine, node.args[0], env)
    if not isinstance(hist, HistSeries):
        return None
    texts = []
    for arg in list(node.args)[1:]:
        v = engine.eval(arg, env)
        if not isinstance(v, StringValue):
            return None  # the float evaluation refuses the call, naming the argument
        texts.append(v.value)
    if node.func.name == "label_replace":
        series = F.label_replace(hist.series, *texts, compat.dot_matches_newline(engine.promql_compat))
    else:
        series = F.label_join(hist.series, texts[0], texts[1], texts[2:])
    return HistSeries(series, hist.hists)


def _settled(engine, node: "pp.Call", env) -> HistSeries | HistRanges | None:
    """The histogram part of a range function's argument, without the windows Prometheus 3 answers from the
    float part or not at all (mixed_windows; the float side, calls.py, warns)."""
    got = evaluate(engine, node.args[0], env)
    if not isinstance(got, HistRanges) or not compat.prometheus_3(engine.promql_compat):
        return got
    floats = engine.range_vector(node.args[0], env)
    return mixed_windows.settle(node.func.name, floats, got)[1] if isinstance(floats, Ranges) else got


def evaluate(engine, node, env) -> HistSeries | HistRanges | None:
    """The histogram part of ``node``'s value, or None (no histograms, or one read by the float
    evaluation itself); NotSupported when ``node`` would drop histograms its arguments hold."""
    node = parser.unwrap(node)
    if isinstance(node, pp.VectorSelector):
        return native_select.select(engine, node, env)
    if isinstance(node, pp.MatrixSelector):
        return native_select.select_ranges(engine, node, env)
    if isinstance(node, pp.Call):
        name = node.func.name
        if name in RATES:
            return rate(engine, node, env)
        if name in ("last_over_time", "first_over_time"):
            return native_ops.end_over_time(_settled(engine, node, env), name == "last_over_time")
        if name in ("sum_over_time", "avg_over_time"):  # (2.42 has no annotations)
            notes = env.ctx.annotate if compat.prometheus_3(engine.promql_compat) else _no_notes
            return native_ops.sum_over_time(_settled(engine, node, env), name == "avg_over_time", notes)
        if compat.prometheus_3(engine.promql_compat):
            if name in ("irate", "idelta"):
                return instant_rate(engine, node, env)
            if name in ("resets", "changes"):  # they count histogram samples themselves (calls.py)
                return None
            if name in FLOAT_ONLY:  # Prometheus 3 leaves histogram samples out of these
                for arg in node.args:
                    evaluate(engine, arg, env)  # what the argument cannot evaluate over histograms is still refused
                return None
        if name in ("label_replace", "label_join") and compat.prometheus_3(engine.promql_compat):
            return relabeled(engine, node, env)  # (2.42 answers the float 0 for a histogram: refused under 2.x)
        # A histogram_* function's other arguments are scalars: a histogram there is refused.
        args = list(node.args)[:-1] if name in CONSUMERS else list(node.args)[1:] if name == "histogram_quantiles" \
            else node.args
        return _refuse(engine, args, env, f"{name}()")
    if isinstance(node, pp.AggregateExpr):
        op = parser.op_name(node).lower()
        if op in ("sum", "avg"):
            _refuse(engine, [node.param], env, f"the parameter of {op}")
            three = compat.prometheus_3(engine.promql_compat)
            h = native_ops.total_by_group(evaluate(engine, node.expr, env), *parser.grouping(node), op == "avg",
                                          env.ctx.annotate if three else None)
            mixed = _mixed_groups(engine, node, env) if three and h is not None else {}
            return HistSeries(_without(h.series, mixed), h.hists) if mixed else h
        if op in limits.OPS:
            hist = evaluate(engine, node.expr, env)
            if not isinstance(hist, HistSeries):
                return None  # (its float evaluation has checked the parameter)
            return limited(engine, node, env, engine.eval(node.param, env), hist)[2]
        if op in IGNORING_AGGREGATIONS and compat.prometheus_3(engine.promql_compat):
            _refuse(engine, [node.param], env, f"the parameter of {op}")
            got = evaluate(engine, node.expr, env)
            if isinstance(got, HistSeries) and got.series.mask.any():
                env.ctx.annotate(annotations.histogram_ignored(op))
            return None
        # count and group count histogram samples themselves (engine.py), and so does Prometheus 3's count_values
        counting = op in ("count", "group") or (op == "count_values" and compat.prometheus_3(engine.promql_compat))
        return _refuse(engine, [node.param] if counting else [node.param, node.expr], env, op)
    if isinstance(node, pp.BinaryExpr):
        return native_ops.operate(engine, node, evaluate(engine, node.lhs, env), evaluate(engine, node.rhs, env), env)
    if isinstance(node, pp.SubqueryExpr):
        return subquery(engine, node, env)
    if isinstance(node, pp.UnaryExpr):
        return native_ops.negate(evaluate(engine, node.expr, env))
    return None  # number and string literals


def _no_notes(_: str) -> None:
    return None


def _refuse(engine, args, env, what: str) -> None:
    for arg in args:
        if arg is not None and evaluate(engine, arg, env) is not None:
            raise NotSupported(f"{what} over native histograms")
    return None


def limited(engine, node: "pp.AggregateExpr", env, param, hist) -> tuple[Series, Series, HistSeries | None]:
    """limitk / limit_ratio of the evaluated parameter ``param`` and input histograms ``hist``
    (``evaluate(node.expr)``): its input's float samples, and the float and the histogram part of its answer
    (limits.py ranks both kinds together)."""
    op = parser.op_name(node).lower()
    inner = engine.eval(node.expr, env)
    if not isinstance(param, ScalarSteps):
        raise BadData(f"expected scalar parameter in aggregation {op}")
    if not isinstance(inner, Series):
        raise BadData(f"expected instant vector in aggregation {op}")
    floats, hists = limits.apply(op, param.values, inner, hist if isinstance(hist, HistSeries) else None,
                                 *parser.grouping(node), env.ctx.annotate)
    return inner, floats, hists


def set_operands(engine, node: "pp.BinaryExpr", lhs: Series, rhs: Series, env) -> tuple[Series, Series]:
    """A set operator's float operands, with the histogram samples that decide which floats it keeps."""
    hl, hr = evaluate(engine, node.lhs, env), evaluate(engine, node.rhs, env)
    if not isinstance(hl, HistSeries) and not isinstance(hr, HistSeries):
        return lhs, rhs
    on, names, _, _ = parser.matching(node)
    return native_ops.set_operands(parser.op_name(node).lower(), lhs, rhs, hl, hr, on, names)


def settle_mixed_groups(engine, node: "pp.AggregateExpr", floats: Series, env) -> Series:
    """A sum/avg group holding float and histogram samples at one step: Prometheus 3 leaves it out with a
    warning (here from the floats; the histogram part leaves it out too); 2.42 answers a wrong number, so
    under 2.x it is refused."""
    if not compat.prometheus_3(engine.promql_compat):
        hist = evaluate(engine, node, env)
        if isinstance(hist, HistSeries):
            native_ops.refuse_mixed(floats, hist.series, f"{parser.op_name(node).lower()}() of a group")
        return floats
    mixed = _mixed_groups(engine, node, env)
    if not mixed:
        return floats
    env.ctx.annotate(annotations.MIXED_FLOATS_HISTOGRAMS_AGGREGATION)
    return _without(floats, mixed)


def bool_comparison(engine, node: "pp.BinaryExpr", floats: Series, env) -> Series:
    """A ``== bool`` / ``!= bool`` comparison's answer with its pairs of histograms compared too (Prometheus 3):
    their 1s and 0s are floats, so they join the float answer."""
    op = parser.op_name(node).lower()
    if op not in ("==", "!="):
        return floats
    hl, hr = evaluate(engine, node.lhs, env), evaluate(engine, node.rhs, env)
    if not (isinstance(hl, HistSeries) and isinstance(hr, HistSeries)):
        return floats
    compared = native_binary3.bool_equality(node, op, hl, hr)
    if not len(compared):
        return floats
    return dedupe(Series(list(floats.labels) + list(compared.labels), np.concatenate([floats.values, compared.values]),
                         np.concatenate([floats.mask, compared.mask])))


def _mixed_groups(engine, node: "pp.AggregateExpr", env) -> dict:
    """group labels -> the steps at which the group holds both float and histogram samples."""
    hist = evaluate(engine, node.expr, env)
    if not isinstance(hist, HistSeries):
        return {}
    floats = engine.eval(node.expr, env)
    if not isinstance(floats, Series) or not len(floats):
        return {}
    without, names = parser.grouping(node)
    keys: dict = {}
    gf = group_ids(floats.labels, without, names, keys)
    gh = group_ids(hist.series.labels, without, names, keys)
    both = (group_sum(gf, len(keys), floats.mask) > 0) & (group_sum(gh, len(keys), hist.series.mask) > 0)
    return {lb: both[i] for i, lb in enumerate(keys) if both[i].any()}


def _without(s: Series, cells: dict) -> Series:
    """``s`` without the points of its rows at the steps ``cells`` gives for their labels."""
    mask = s.mask.copy()
    for i, lb in enumerate(s.labels):
        if lb in cells:
            mask[i] &= ~cells[lb]
    return Series(s.labels, np.where(mask, s.values, 0.0), mask).compact()
