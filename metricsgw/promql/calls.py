"""Function calls: evaluate the arguments, then dispatch by name to functions.py,
rangefuncs.py or histograms.py. A function we do not evaluate is NotSupported."""

from __future__ import annotations

import math

import numpy as np
import promql_parser as pp

from ..errors import BadData, NotSupported
from . import functions as F
from . import annotations, compat, held, mixed_windows, native_eval, native_ops, native_values, parser
from . import rangefuncs as R
from .binary import dedupe
from .histograms import histogram_fraction, histogram_quantile
from .value import Ranges, ScalarSteps, Series, StringValue, drop_name

RATE_LIKE = {
    "rate": (True, True),
    "increase": (True, False),
    "delta": (False, False),
}
OVER_TIME = {
    "count_over_time", "present_over_time", "sum_over_time", "avg_over_time", "min_over_time",
    "max_over_time", "last_over_time", "stddev_over_time", "stdvar_over_time",
    # Prometheus 3's (experimental there, served here without a flag):
    "first_over_time", "ts_of_first_over_time", "ts_of_last_over_time", "ts_of_min_over_time",
    "ts_of_max_over_time", "mad_over_time",
}
# Functions that see a window's histogram samples as well as its floats (the rest leave histograms out).
_SEEING_HISTOGRAMS = {"count_over_time", "present_over_time", "last_over_time", "first_over_time", "sum_over_time",
                      "avg_over_time", "ts_of_first_over_time", "ts_of_last_over_time"}


class _Taken:
    """What a call's arguments hold, for held.py: their points at each step, and the range vector
    a range function slides over."""

    def __init__(self, steps: int) -> None:
        self.inputs = np.zeros(steps, np.int64)
        self.ranges: Ranges | None = None


def call(engine, node: "pp.Call", env):
    base = env.ctx.samples
    taken = _Taken(len(env.steps))
    res = _call(engine, node, env, taken)
    name = node.func.name
    if taken.ranges is not None:
        held.series_by_series(env.ctx, name, taken.ranges, f"{name}()")
    else:
        # timestamp(selector): 2.42 takes the selector's points a step at a time, beside the output so far
        at = base if name == "timestamp" and isinstance(parser.unwrap(node.args[0]), pp.VectorSelector) else None
        held.step_by_step(env.ctx, base, taken.inputs, res, f"{name}()", at)
    return res


def _call(engine, node: "pp.Call", env, taken: _Taken):
    name = node.func.name
    args = list(node.args)
    n_steps = len(env.steps)

    def ev(i: int):
        v = engine.eval(args[i], env)
        taken.inputs += held.per_step(v, n_steps)
        return v

    def scalar_arg(i: int) -> np.ndarray:
        v = ev(i)
        if not isinstance(v, ScalarSteps):
            raise BadData(f"expected scalar argument {i + 1} to {name}()")
        return v.values

    def string_arg(i: int) -> str:
        v = ev(i)
        if not isinstance(v, StringValue):
            raise BadData(f"expected string argument {i + 1} to {name}()")
        return v.value

    def vector_arg(i: int) -> Series:
        v = ev(i)
        if not isinstance(v, Series):
            raise BadData(f"expected instant vector argument {i + 1} to {name}()")
        return v

    def range_arg(i: int) -> Ranges:
        v = engine.range_vector(args[i], env)
        if not isinstance(v, Ranges):
            raise BadData(f"expected range vector argument {i + 1} to {name}()")
        taken.ranges = v
        return v

    three = compat.prometheus_3(engine.promql_compat)
    # A range function over a selector naming one metric: its series' label sets stay distinct without the name.
    selector = _vector_selector(args[0]) if args else None
    distinct = _same_rows if selector is not None and parser.names_one_metric(selector) else _dedupe_whole

    def settled(r: Ranges) -> Ranges:
        """``r`` without the windows Prometheus 3 leaves to the histogram part, or to nobody (mixed_windows)."""
        hist = native_eval.evaluate(engine, args[0], env) if three else None
        return mixed_windows.settle(name, r, hist, env.ctx.annotate)[0] if isinstance(
            hist, native_values.HistRanges) else r

    if name in RATE_LIKE:
        counter, is_rate = RATE_LIKE[name]
        return distinct(R.extrapolated_rate(settled(range_arg(0)), counter, is_rate, three))
    if name in ("irate", "idelta"):
        return distinct(R.instant_rate(settled(range_arg(0)), name == "irate"))
    if name in ("changes", "resets"):
        r = range_arg(0)
        hist = native_eval.evaluate(engine, args[0], env) if compat.prometheus_3(engine.promql_compat) else None
        if isinstance(hist, native_values.HistRanges):  # Prometheus 3 counts histogram samples too
            return distinct(native_ops.pairs_over_time(r, hist, name == "resets"))
        return distinct(R.changes(r) if name == "changes" else R.resets(r))
    if name in OVER_TIME:
        r = range_arg(0)
        if three and name in native_eval.FLOAT_ONLY:
            _note_ignored_histograms(engine, args[0], r, env)
        if name in _SEEING_HISTOGRAMS:
            hist = native_eval.evaluate(engine, args[0], env)  # these see histograms too (native_eval)
            if isinstance(hist, native_values.HistRanges) and name in ("count_over_time", "present_over_time"):
                return native_ops.points_over_time(r, hist, name == "present_over_time")
            if isinstance(hist, native_values.HistRanges) and name.startswith("ts_of_"):
                return native_ops.times_over_time(r, hist, name == "ts_of_last_over_time")
            if isinstance(hist, native_values.HistRanges) and three:
                r = mixed_windows.settle(name, r, hist, env.ctx.annotate)[0]  # the histogram part is native_eval's
            elif isinstance(hist, native_values.HistRanges):
                native_ops.refuse_mixed(r, hist.ranges, f"{name}() of a series")
        return distinct(R.over_time(name, r, three))
    if name == "quantile_over_time":
        r = range_arg(1)  # first, as 2.42 evaluates a subquery argument before the others
        q = scalar_arg(0)
        if three:
            _note_invalid_quantile(q, env)
            _note_ignored_histograms(engine, args[1], r, env)
        return distinct(R.quantile_over_time(q, r))
    if name in ("holt_winters", "double_exponential_smoothing"):  # 3.x's name for it (compat.py)
        r = range_arg(0)
        if three:
            _note_ignored_histograms(engine, args[0], r, env)
        return distinct(R.holt_winters(r, scalar_arg(1), scalar_arg(2)))
    if name == "histogram_fraction" and three:  # Prometheus 3's: of classic histograms too
        lower, upper = scalar_arg(0), scalar_arg(1)
        classic = histogram_fraction(lower, upper, vector_arg(2), env.ctx.annotate)
        hist = native_eval.evaluate(engine, args[2], env)
        if not isinstance(hist, native_values.HistSeries):
            return classic
        native = native_values.fraction(lower, upper, hist, three, env.ctx.annotate)
        return dedupe(_classic_and_native(classic, native, three, env.ctx.annotate, args[2], engine, env))
    if name in ("histogram_count", "histogram_sum", "histogram_fraction", "histogram_avg", "histogram_stddev",
                "histogram_stdvar"):
        # On float samples Prometheus 2.42 returns nothing: only native histograms count.
        scalars = [scalar_arg(i) for i in range(len(args) - 1)]
        hist = _native_arg(engine, args[-1], env)
        if hist is None:
            return Series.empty(n_steps)
        if name == "histogram_count":
            return native_values.count(hist)
        if name == "histogram_sum":
            return native_values.total(hist)
        if name == "histogram_avg":
            return native_values.mean(hist)
        if name in ("histogram_stddev", "histogram_stdvar"):
            return native_values.spread(hist, name == "histogram_stddev")
        return native_values.fraction(scalars[0], scalars[1], hist, three, env.ctx.annotate)
    if name in ("deriv", "predict_linear"):
        r = range_arg(0)
        if three:
            _note_ignored_histograms(engine, args[0], r, env)
        if name == "deriv":
            return distinct(R.deriv(r))
        return distinct(R.predict_linear(r, env.steps, scalar_arg(1)))
    if name == "absent_over_time":
        r = range_arg(0)
        present = (r.hi > r.lo).any(axis=0) if len(r) else np.zeros(n_steps, bool)
        hist = native_eval.evaluate(engine, args[0], env)  # histogram samples are present too
        if isinstance(hist, native_values.HistRanges):
            present = present | (hist.ranges.hi > hist.ranges.lo).any(axis=0)
        return F.absent(present, F.absent_labels(_selector_matchers(args[0])))
    if name == "absent":
        s = vector_arg(0)
        present = s.mask.any(axis=0) if len(s) else np.zeros(n_steps, bool)
        hist = native_eval.evaluate(engine, args[0], env)
        if isinstance(hist, native_values.HistSeries):
            present = present | hist.series.mask.any(axis=0)
        return F.absent(present, F.absent_labels(_selector_matchers(args[0])))
    if name in F.MATH:
        return F.math_fn(name, vector_arg(0))
    if name == "round":
        return F.round_fn(vector_arg(0), ScalarSteps(scalar_arg(1)) if len(args) > 1 else None)
    if name == "clamp":
        return F.clamp(vector_arg(0), scalar_arg(1), scalar_arg(2))
    if name == "clamp_min":
        return F.clamp(vector_arg(0), scalar_arg(1), None)
    if name == "clamp_max":
        return F.clamp(vector_arg(0), None, scalar_arg(1))
    if name == "timestamp":
        out = F.timestamp(vector_arg(0), env.steps)
        hist = native_eval.evaluate(engine, args[0], env)  # a histogram sample has a timestamp too
        if isinstance(hist, native_values.HistSeries):
            out = dedupe(_concat(out, F.timestamp(hist.series, env.steps)))
        return out
    if name == "pi":
        return ScalarSteps(np.full(n_steps, np.pi))
    if name == "time":
        return ScalarSteps(env.steps / 1000.0)
    if name == "vector":
        return F.vector(ScalarSteps(scalar_arg(0)))
    if name == "scalar":
        return F.scalar(vector_arg(0))
    if name in ("sort", "sort_desc"):
        if three and env.start_ms != env.end_ms:
            env.ctx.annotate(annotations.SORT_IN_RANGE_QUERY)
        return F.sort(vector_arg(0), name == "sort_desc")
    if name in ("sort_by_label", "sort_by_label_desc"):
        if env.start_ms != env.end_ms:
            env.ctx.annotate(annotations.SORT_IN_RANGE_QUERY)
        return F.sort_by_label(vector_arg(0), [string_arg(i) for i in range(1, len(args))],
                               name == "sort_by_label_desc")
    if name == "label_replace":
        return F.label_replace(vector_arg(0), string_arg(1), string_arg(2), string_arg(3), string_arg(4),
                               compat.dot_matches_newline(engine.promql_compat))
    if name == "label_join":
        return F.label_join(vector_arg(0), string_arg(1), string_arg(2), [string_arg(i) for i in range(3, len(args))])
    if name == "histogram_quantile":
        q = scalar_arg(0)
        return _quantiles(engine, args[1], vector_arg(1), [q], env, three)
    if name == "histogram_quantiles" and three:  # Prometheus 3's: a series per quantile, told apart by a label
        inner, label = vector_arg(0), string_arg(1)
        qs = [scalar_arg(i) for i in range(2, len(args))]
        return dedupe(_concat_all([_with_label(s, label, q) for s, q in zip(
            _quantiles(engine, args[0], inner, qs, env, three, dedupe_each=False), qs)], n_steps))
    if name in F.DATE_FUNCS:
        if args:
            return F.date_fn(name, vector_arg(0))
        return F.date_fn(name, F.vector(ScalarSteps(env.steps / 1000.0)))
    raise NotSupported(f"function {name}()")


def _native_arg(engine, node, env):
    """The native histograms of a function's vector argument, or None (the argument is still
    evaluated as floats then, so a wrong type is refused as before)."""
    hist = native_eval.evaluate(engine, node, env)
    if isinstance(hist, native_values.HistSeries):
        return hist
    if not isinstance(engine.eval(node, env), Series):
        raise BadData("expected instant vector argument to a histogram function")
    return None


def _quantiles(engine, node, inner: Series, qs: list[np.ndarray], env, three: bool,
               dedupe_each: bool = True) -> list[Series] | Series:
    """histogram_quantile of ``inner`` (classic buckets) and of the native histograms ``node`` gives, for
    each of ``qs`` (one Series when there is one q, a list for histogram_quantiles)."""
    hist = native_eval.evaluate(engine, node, env)
    annotate = env.ctx.annotate if three else (lambda _: None)
    out = []
    for q in qs:
        if three:
            _note_invalid_quantile(q, env)
        res = histogram_quantile(ScalarSteps(q), inner, annotate)
        if isinstance(hist, native_values.HistSeries):
            res = _classic_and_native(res, native_values.quantile(q, hist, three, annotate), three, annotate,
                                      node, engine, env)
        out.append(dedupe(res) if dedupe_each else res)
    return out[0] if len(qs) == 1 and dedupe_each else out


def _note_invalid_quantile(q: np.ndarray, env) -> None:
    """Prometheus 3 warns of a quantile outside [0, 1] (the answer is -Inf/+Inf/NaN as before)."""
    for bad in q[np.isnan(q) | (q < 0) | (q > 1)][:1].tolist():
        env.ctx.annotate(annotations.invalid_quantile(bad))


def _note_ignored_histograms(engine, arg, r: Ranges, env) -> None:
    """Prometheus 3's info when a float-only range function leaves out histograms of a window that also
    holds floats."""
    hist = native_eval.evaluate(engine, arg, env)
    if not isinstance(hist, native_values.HistRanges):
        return
    floats = {lb: (r.hi[i] > r.lo[i]) for i, lb in enumerate(r.labels)}
    for j, lb in enumerate(hist.ranges.labels):
        if lb in floats and (floats[lb] & (hist.ranges.hi[j] > hist.ranges.lo[j])).any():
            env.ctx.annotate(annotations.histogram_ignored_in_mixed_range(dict(lb).get("__name__", "")))


def _classic_and_native(classic: Series, native: Series, three: bool, annotate, node, engine, env) -> Series:
    """Both answers; Prometheus 3 leaves out a series that is both a classic and a native histogram (with a
    warning naming its metric), where 2.42 fails on the duplicate."""
    if three:
        both = set(classic.labels) & set(native.labels)
        if both:
            names = {drop_name(tuple(p for p in lb if p[0] != "le")): dict(lb).get("__name__", "")
                     for lb in engine.eval(node, env).labels}
            for lb in both:
                annotate(annotations.mixed_classic_native(names.get(lb, "")))
            classic, native = (s.take([i for i, lb in enumerate(s.labels) if lb not in both])
                               for s in (classic, native))
    return _concat(classic, native)


def _with_label(s: Series, name: str, q: np.ndarray) -> Series:
    """``s`` with label ``name`` set to the quantile, written as OpenMetrics writes a float ("0.5", "1.0")."""
    if len(q) and not (q == q[0]).all() and not np.isnan(q).all():
        raise NotSupported("histogram_quantiles with a quantile that changes from step to step")
    value = _openmetrics_float(float(q[0])) if len(q) else ""
    return Series([tuple(sorted({**dict(lb), name: value}.items())) for lb in s.labels], s.values, s.mask)


def _openmetrics_float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    text = repr(v)
    return text if any(ch in text for ch in ".e") else text + ".0"


def _concat_all(parts: list[Series], steps: int) -> Series:
    out = Series.empty(steps)
    for part in parts:
        out = _concat(out, part)
    return out


def _concat(a: Series, b: Series) -> Series:
    if not len(a):
        return b
    if not len(b):
        return a
    return Series(a.labels + b.labels, np.concatenate([a.values, b.values]), np.concatenate([a.mask, b.mask]))


def _vector_selector(node) -> "pp.VectorSelector | None":
    """The selector ``node`` is, or that its range selection selects from (None for anything else)."""
    node = parser.unwrap(node)
    if isinstance(node, pp.MatrixSelector):
        node = node.vector_selector
    return node if isinstance(node, pp.VectorSelector) else None


def _selector_matchers(node):
    selector = _vector_selector(node)
    return [] if selector is None else parser.matchers(selector)


def _same_rows(s: Series) -> Series:
    return s


def _dedupe_whole(s: Series) -> Series:
    """Range functions: two series with one label set (after dropping __name__) is an error
    for the whole result, as in Prometheus's matrix-function path."""
    if len(set(s.labels)) != len(s.labels):
        from ..errors import ExecError

        raise ExecError("vector cannot contain metrics with the same labelset")
    return s  # what dedupe() returns for distinct label sets, without hashing them again
