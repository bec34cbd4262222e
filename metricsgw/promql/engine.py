"""The PromQL engine: parse, then evaluate the AST for every step of the query at once.

``Engine(source)`` reads through the read seam (storage/seam.py): a SampleReader's select_series /
estimate_samples / read_samples, and a HistogramReader's methods where the source has them; so the
DuckDB storage, a ClusterSource and the in-memory MemSource are interchangeable.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace

import numpy as np
import promql_parser as pp

from ..errors import BadData, NotSupported
from ..limits.context import SAMPLE_BYTES, QueryContext
from ..storage.seam import SampleReader
from . import (batching, binary, compat, held, limits, native_eval, native_select, native_values, parser, selectors,
               stats_decoding)
from .aggregations import aggregate, check_parameter, count_values
from .calls import call
from .parallel import Parts
from .value import Matrix, Ranges, Scalar, ScalarSteps, Series, String, StringValue, Value, Vector, drop_names


@dataclass
class Env:
    steps: np.ndarray  # int64 ms: the evaluation times
    start_ms: int  # the query's own start/end, for @ start() / end()
    end_ms: int
    ctx: QueryContext
    trims: dict = field(default_factory=dict)  # the query's trim operators (parser.parse_with_trims)
    # the selectors Prometheus 3 reads histogram statistics only from (stats_decoding.py), by id
    stats: frozenset = frozenset()
    # Histogram selections made at these steps (native_select.histogram_selection): the float and the histogram
    # evaluation of an instant selector both need them, and loading them twice held them twice. Not copied by
    # ``dataclasses.replace`` (init=False): other steps, another batch's source, or another part's charges.
    histogram_selections: dict = field(default_factory=dict, init=False, repr=False, compare=False)


class Engine:
    def __init__(self, source: SampleReader, lookback_s: float = 300.0, max_points: int = 11000,
                 subquery_step_s: float = 60.0, batch_samples: int = 2_000_000,
                 parts: Parts | None = None, promql_compat: int = compat.PROMETHEUS_3) -> None:
        self.source = source
        # Which Prometheus' answers differences are settled by (compat.py; --query.promql-compat).
        self.promql_compat = promql_compat
        # Where an aggregation's batches of series are evaluated side by side (None: one by one).
        self.parts = parts
        # Aggregations over one metric read about this many raw samples per batch of series
        # (promql/batching.py); fewer when the query's --query.max-samples leaves less room.
        self.batch_samples = batch_samples
        self.lookback_ms = int(round(lookback_s * 1000))
        self.max_points = max_points
        self.subquery_step_ms = int(round(subquery_step_s * 1000))

    @property
    def left_open(self) -> bool:
        return compat.left_open(self.promql_compat)

    @property
    def prometheus_3(self) -> bool:
        return compat.prometheus_3(self.promql_compat)

    def over(self, source: SampleReader) -> "Engine":
        """The same engine reading from another source (one query's, e.g. with peers' data)."""
        if source is self.source:
            return self
        engine = copy.copy(self)
        engine.source = source
        return engine

    # ---- public API -----------------------------------------------------------------

    def parse(self, query: str):
        """The tree of ``query`` and its trim operators, as --query.promql-compat reads it."""
        return compat.parse(query, self.promql_compat)

    def instant(self, query: str, t_s: float, ctx: QueryContext) -> Value:
        node, trims = self.parse(query)
        t = _ms(t_s)
        ctx.counts_raw_samples = False  # --query.max-samples counts what the evaluation holds (held.py)
        env = Env(np.array([t], np.int64), t, t, ctx, trims, self._stats(node, trims))
        res = self._eval_top(node, env)
        ctx.check("result")
        # The histograms shown beside the floats (and the refusal of what would drop histograms).
        hist = native_eval.evaluate(self, node, env)
        ts = t / 1000.0
        if isinstance(res, Series):
            rows = np.flatnonzero(res.mask[:, 0])
            out = Vector(ts, [res.labels[i] for i in rows], res.values[rows, 0].copy())
            if isinstance(hist, native_values.HistSeries):
                out.hist_labels, out.hists = native_values.vector_points(hist)
            return out
        if isinstance(res, ScalarSteps):
            return Scalar(ts, float(res.values[0]))
        if isinstance(res, StringValue):
            return String(ts, res.value)
        matrix = _ranges_matrix(res)
        if isinstance(hist, native_values.HistRanges):
            matrix.hist_rows = native_values.range_rows(hist)
        return matrix

    def range(self, query: str, start_s: float, end_s: float, step_s: float, ctx: QueryContext) -> Value:
        start, end, step = _ms(start_s), _ms(end_s), _ms(step_s)
        if step <= 0:
            raise BadData("zero or negative query resolution step widths are not accepted. Try a positive integer")
        if end < start:
            raise BadData("end timestamp must not be before start time")
        if (end - start) // step > self.max_points:
            raise BadData(
                f"exceeded maximum resolution of {self.max_points:,} points per timeseries. "
                "Try decreasing the query resolution (?step=XX)"
            )
        node, trims = self.parse(query)
        if isinstance(parser.unwrap(node), (pp.MatrixSelector, pp.SubqueryExpr)):
            # refused before evaluation, as Prometheus does (not by the count of samples it would hold)
            raise BadData(_NOT_FOR_RANGE.format(kind="range vector"))
        steps = np.arange(start, end + 1, step, dtype=np.int64)
        ctx.counts_raw_samples = False  # --query.max-samples counts what the evaluation holds (held.py)
        env = Env(steps, start, end, ctx, trims, self._stats(node, trims))
        res = self._eval_top(node, env)
        ctx.check("result")
        if isinstance(res, ScalarSteps):
            res = Series([()], res.values[None, :], np.ones((1, len(steps)), bool))
        if not isinstance(res, Series):
            kind = "range vector" if isinstance(res, Ranges) else "string"
            raise BadData(_NOT_FOR_RANGE.format(kind=kind))
        out = series_matrix(res, steps)
        hist = native_eval.evaluate(self, node, env)  # the histograms shown beside the floats
        if isinstance(hist, native_values.HistSeries):
            out.hist_rows = native_values.matrix_rows(hist, steps)
        return out

    def _stats(self, node, trims: dict) -> frozenset:
        return stats_decoding.stats_selectors(node, trims) if self.prometheus_3 else frozenset()

    # ---- evaluation -------------------------------------------------------------------

    def _eval_top(self, node, env: Env):
        # The evaluator recurses once per level of the syntax tree. The API bounds that depth
        # before parsing (limits/query_text.py); should a query still go deeper than the
        # interpreter allows, it is the query's fault: a 400, never a 500.
        try:
            return self.eval(node, env)
        except RecursionError:
            raise BadData("query is nested too deeply to evaluate (lower its nesting, or the "
                          "--query.max-depth/--query.max-terms limits that admitted it)") from None

    def eval(self, node, env: Env):
        env.ctx.check("evaluation")
        res = self._eval_node(node, env)
        # Again after the node: a long numpy/sort step in it cannot be interrupted, and its
        # parent may not ask before doing more long work (a client that left waits no longer).
        env.ctx.check("evaluation")
        return res

    def _eval_node(self, node, env: Env):
        if isinstance(node, pp.ParenExpr):
            return self.eval(node.expr, env)
        if isinstance(node, pp.NumberLiteral):
            value = ScalarSteps(np.full(len(env.steps), float(node.val)))
            held.step_by_step(env.ctx, env.ctx.samples, np.zeros(len(env.steps), np.int64), value, "number literal")
            return value
        if isinstance(node, pp.StringLiteral):
            return StringValue(node.val)
        if isinstance(node, pp.UnaryExpr):
            return _negate(self.eval(node.expr, env))
        if isinstance(node, pp.VectorSelector):
            return self.vector_selector(node, env)
        if isinstance(node, pp.MatrixSelector):  # evaluated as such: a function's argument is range_vector's
            r = self.matrix_selector(node, env)
            held.windows(env.ctx, r, "range vector selection")
            return r
        if isinstance(node, pp.SubqueryExpr):
            return self.subquery(node, env)
        if isinstance(node, pp.Call):
            return call(self, node, env)
        if isinstance(node, pp.AggregateExpr):
            return self.aggregate(node, env)
        if isinstance(node, pp.BinaryExpr):
            return self.binary(node, env)
        raise NotSupported(f"expression {type(node).__name__}")

    def range_vector(self, node, env: Env):
        """A range function's argument. A matrix selector's windows are counted by the function
        that slides over them (held.series_by_series), not all at once as ``eval`` counts them."""
        node = parser.unwrap(node)
        if isinstance(node, pp.MatrixSelector):
            env.ctx.check("evaluation")
            return self.matrix_selector(node, env)
        return self.eval(node, env)

    def ref_times(self, node, env: Env) -> np.ndarray:
        """Evaluation times after @ and offset: where a selector or subquery looks."""
        at = parser.at_modifier(node)
        if at is None:
            t = env.steps
        else:
            kind, ms = at
            fixed = env.start_ms if kind == "start" else env.end_ms if kind == "end" else ms
            t = np.full(len(env.steps), fixed, np.int64)
        return t - parser.duration_ms(node.offset)

    def selector_window(self, node, env: Env) -> tuple[list, int, int]:
        """A vector or matrix selector's matchers and the time window it reads."""
        if isinstance(node, pp.MatrixSelector):
            ref = self.ref_times(node.vector_selector, env)
            ms = parser.matchers(node.vector_selector)
            start = int(ref.min()) - parser.duration_ms(node.range)
        else:
            ref = self.ref_times(node, env)
            ms = parser.matchers(node)
            start = int(ref.min()) - self.lookback_ms
        _check_matchers(ms)
        return compat.matchers(ms, self.promql_compat), start, int(ref.max())

    def vector_selector(self, node: "pp.VectorSelector", env: Env) -> Series:
        s = self.float_selection(node, env)
        hists = native_select.histogram_selection(self, node, env)
        if hists is not None:  # a series' newest sample within the lookback is a histogram: no float there
            s = native_select.newest_only(s, hists.series)
        held.selected(env.ctx, s, "instant vector selection")
        return s

    def float_selection(self, node: "pp.VectorSelector", env: Env) -> Series:
        """Each series' newest float sample within the lookback, whatever histogram samples it has."""
        ref = self.ref_times(node, env)
        ms, start, end = self.selector_window(node, env)
        loaded = selectors.load(self.source, ms, start, end, env.ctx)
        # The (series x step) matrix replaces the raw samples (their bytes already charged by the
        # source): charge the memory it adds beyond them before building it.
        env.ctx.charge_points(max(0, len(loaded.labels) * len(ref) - len(loaded.t)), "instant vector selection")
        return selectors.instant(loaded, ref, self.lookback_ms, self.left_open)

    def matrix_selector(self, node: "pp.MatrixSelector", env: Env) -> Ranges:
        ref = self.ref_times(node.vector_selector, env)
        rng = parser.duration_ms(node.range)
        ms, start, end = self.selector_window(node, env)
        loaded = selectors.load(self.source, ms, start, end, env.ctx)
        # A range vector is index arithmetic over the raw samples the source already charged.
        return selectors.ranges(loaded, ref, rng, self.left_open)

    def subquery_grid(self, node: "pp.SubqueryExpr", env: Env) -> tuple[np.ndarray, int, np.ndarray]:
        """A subquery's window ends (after @ and offset), its range, and the steps its inner query is evaluated at."""
        ref = self.ref_times(node, env)
        rng = parser.duration_ms(node.range)
        step = parser.duration_ms(node.step) if node.step is not None else self.subquery_step_ms
        if step <= 0:
            raise BadData("zero or negative subquery step")
        lo = int(ref.min()) - rng
        first = (lo // step) * step
        if first < lo or (first == lo and self.left_open):  # a step at the open limit is out of every window
            first += step
        # `x[1y:1ms]` would build a grid of 31.5e9 steps (235 GiB) before anything is charged:
        # refuse by its memory first (the grid and a point of the inner query for every step).
        env.ctx.check_estimate(max(0, (int(ref.max()) - first) // step + 1), "subquery steps")
        return ref, rng, np.arange(first, int(ref.max()) + 1, step, dtype=np.int64)

    def subquery(self, node: "pp.SubqueryExpr", env: Env) -> Ranges:
        ref, rng, grid = self.subquery_grid(node, env)
        if len(grid) == 0:
            return selectors.ranges(selectors.series_as_samples(Series.empty(0), grid), ref, rng, self.left_open)
        base = env.ctx.samples
        inner = self.eval(node.expr, replace(env, steps=grid))
        if isinstance(inner, ScalarSteps):
            inner = Series([()], inner.values[None, :], np.ones((1, len(grid)), bool))
        if not isinstance(inner, Series):
            raise BadData("subquery is only allowed on instant vector")
        env.ctx.charge_bytes(int(inner.mask.sum()) * SAMPLE_BYTES, "subquery evaluation")
        r = selectors.ranges(selectors.series_as_samples(inner, grid), ref, rng, self.left_open)
        r.held = env.ctx.samples - base  # the inner result, held as Prometheus holds it
        return r

    def aggregate(self, node: "pp.AggregateExpr", env: Env) -> Series:
        base = env.ctx.samples
        param = None
        if node.param is not None:
            param = self.eval(node.param, env)
        res, inputs = self._aggregate(node, param, env)
        held.step_by_step(env.ctx, base, inputs + held.per_step(param, len(env.steps)), res, "aggregation")
        if parser.op_name(node).lower() in ("sum", "avg") and len(res):
            res = native_eval.settle_mixed_groups(self, node, res, env)
        return res

    def _aggregate(self, node: "pp.AggregateExpr", param, env: Env) -> tuple[Series, np.ndarray]:
        """The aggregation, and its input's points at each step."""
        op = parser.op_name(node).lower()
        without, names = parser.grouping(node)
        if self.prometheus_3 and isinstance(param, ScalarSteps):
            check_parameter(op, param.values, env.ctx.annotate)
        if op in ("count", "group"):  # these count histogram samples too, as 2.42 does
            hist = native_eval.evaluate(self, node.expr, env)
            if hist is not None:
                inner = self.eval(node.expr, env)
                if not isinstance(inner, Series):
                    raise BadData(f"expected instant vector in aggregation {op}")
                inner = native_values.with_histogram_points(inner, hist)
                return (aggregate(op, inner, without, names, param, self.prometheus_3),
                        held.per_step(inner, len(env.steps)))
        if op == "count_values" and self.prometheus_3:  # Prometheus 3 counts histograms too, by their text
            hist = native_eval.evaluate(self, node.expr, env)
            if isinstance(hist, native_values.HistSeries):
                inner = self.eval(node.expr, env)
                if not isinstance(inner, Series):
                    raise BadData(f"expected instant vector in aggregation {op}")
                if not isinstance(param, StringValue):
                    raise BadData("expected string parameter in count_values")
                texts = [(hist.series.labels[i], k, native_values.text(hist.hists[j]))
                         for i, k, j in zip(*(a.tolist() for a in native_values.cells(hist.series)))]
                return (count_values(inner, without, names, param.value, texts),
                        held.per_step(inner, len(env.steps)) + held.per_step(hist.series, len(env.steps)))
        if op in limits.OPS:  # they keep float and histogram samples alike: decided with both (native_eval)
            inner, res, _ = native_eval.limited(self, node, env, param, native_eval.evaluate(self, node.expr, env))
            return res, held.per_step(inner, len(env.steps))
        # (batching evaluates a trim operator's node as the comparison it is parsed as: not with trims)
        selector = None if env.trims else batching.batchable_selector(node.expr)
        if selector is not None and _param_ok(op, param):
            return batching.evaluate_batched(self, op, node.expr, selector, without, names,
                                             param.value if op == "count_values" else param, env)
        inner = self.eval(node.expr, env)
        if not isinstance(inner, Series):
            raise BadData(f"expected instant vector in aggregation {op}")
        if op in ("topk", "bottomk", "quantile") and not isinstance(param, ScalarSteps):
            raise BadData(f"expected scalar parameter in aggregation {op}")
        if op == "count_values":
            if not isinstance(param, StringValue):
                raise BadData("expected string parameter in count_values")
            param = param.value
        if op not in {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk",
                      "quantile", "count_values"}:
            raise NotSupported(f"aggregation {op}")
        return aggregate(op, inner, without, names, param, self.prometheus_3), held.per_step(inner, len(env.steps))

    def binary(self, node: "pp.BinaryExpr", env: Env):
        base = env.ctx.samples
        lhs = self.eval(node.lhs, env)
        rhs = self.eval(node.rhs, env)
        if parser.op_name(node).lower() in binary.SETOPS and isinstance(lhs, Series) and isinstance(rhs, Series):
            lhs, rhs = native_eval.set_operands(self, node, lhs, rhs, env)  # histogram samples match too
        # A trim operator drops float samples (Prometheus 3 with an info annotation); native_eval trims histograms.
        res = Series.empty(len(env.steps)) if id(node) in env.trims else self._binary(node, lhs, rhs)
        if self.prometheus_3 and isinstance(res, Series) and parser.is_bool(node):
            res = native_eval.bool_comparison(self, node, res, env)  # histograms compared with == bool / != bool
        if self.prometheus_3 and isinstance(res, Series) and parser.op_name(node).lower() == "atan2":
            res = binary.dedupe(Series(drop_names(res.labels), res.values, res.mask))  # 2.42 kept it
        inputs = held.per_step(lhs, len(env.steps)) + held.per_step(rhs, len(env.steps))
        held.step_by_step(env.ctx, base, inputs, res, "binary operation")
        return res

    def _binary(self, node: "pp.BinaryExpr", lhs, rhs):
        op = parser.op_name(node).lower()
        rb = parser.is_bool(node)
        if isinstance(lhs, ScalarSteps) and isinstance(rhs, ScalarSteps):
            return binary.scalar_scalar(op, lhs, rhs)
        if isinstance(lhs, Series) and isinstance(rhs, ScalarSteps):
            return binary.vector_scalar(op, lhs, rhs, True, rb)
        if isinstance(lhs, ScalarSteps) and isinstance(rhs, Series):
            return binary.vector_scalar(op, rhs, lhs, False, rb)
        if isinstance(lhs, Series) and isinstance(rhs, Series):
            on, names, card, include = parser.matching(node)
            return binary.vector_vector(op, lhs, rhs, on, names, card, include, rb, strict=self.prometheus_3)
        raise BadData("binary expression must contain only scalar and instant vector types")


_NOT_FOR_RANGE = 'invalid expression type "{kind}" for range query, must be Scalar or instant Vector'


def _param_ok(op: str, param) -> bool:
    """Batching skips the checks ``aggregate`` makes: only take it when they would pass."""
    if op in ("topk", "bottomk", "quantile"):
        return isinstance(param, ScalarSteps)
    if op == "count_values":
        return isinstance(param, StringValue)
    return op in batching.STREAMED or op in ("avg", "stddev", "stdvar")


def _ms(t_s: float) -> int:
    if not math.isfinite(t_s):
        raise BadData(f"invalid time {t_s}")
    return int(round(t_s * 1000))


def _check_matchers(ms) -> None:
    if all(m.matches_empty() for m in ms):
        raise BadData("vector selector must contain at least one non-empty matcher")


def _negate(v):
    if isinstance(v, ScalarSteps):
        return ScalarSteps(-v.values)
    if isinstance(v, Series):
        return binary.dedupe(Series(drop_names(v.labels), -v.values, v.mask))
    raise BadData("unary expression only allowed on expressions of type scalar or instant vector")


def series_matrix(s: Series, steps: np.ndarray) -> Matrix:
    """A range query's result: series sorted by labels, each with its present points."""
    order = sorted(range(len(s)), key=lambda i: s.labels[i])
    order = [i for i in order if s.mask[i].any()]
    if not order:
        return Matrix([], np.empty(0, np.int64), np.empty(0), np.zeros(1, np.int64))
    m = s.mask[order]
    rows, cols = np.nonzero(m)
    offsets = np.concatenate([[0], np.cumsum(m.sum(axis=1))]).astype(np.int64)
    return Matrix([s.labels[i] for i in order], steps[cols].astype(np.int64), s.values[order][rows, cols], offsets)


def _ranges_matrix(r: Ranges) -> Matrix:
    """An instant query of a range vector: the raw samples in each series' window."""
    labels, ts, vs, offs = [], [], [], [0]
    for i, l in enumerate(r.labels):
        a, b = int(r.lo[i, 0]), int(r.hi[i, 0])
        if b <= a:
            continue
        labels.append(l)
        ts.append(r.t[a:b])
        vs.append(r.v[a:b])
        offs.append(offs[-1] + b - a)
    if not labels:
        return Matrix([], np.empty(0, np.int64), np.empty(0), np.zeros(1, np.int64))
    return Matrix(labels, np.concatenate(ts), np.concatenate(vs), np.array(offs, np.int64))
