"""Aggregations over one metric's series, evaluated a batch of series at a time.

``sum by (x)(rate(m[5m]))`` and the other dashboard staples need, per series, only that
series' samples: the aggregation's input can be built a batch of series at a time, and each
batch's raw samples let go before the next is read. So the memory the query holds at once is
one batch of samples plus the aggregation's input points (or, for sum/count/min/max/group, just
the groups' running totals), whatever the number of series. (--query.max-samples counts what
Prometheus's engine would hold, whatever the batches: promql/held.py.)

Results are bit-identical to evaluating all series at once: series are selected once, and either
- the batches' rows fit a quarter of what the query has left (a dashboard refresh's few steps): batches hold
  series adjacent by id, so each batch's read prunes the files' row groups (files are sorted by metric and id),
  and their rows are put back in label order (the order the unbatched evaluation lays rows out in) before one
  aggregation; or
- they do not (a long range over many series): batches follow label order and the streamed aggregations fold
  rows into their accumulators in that order with the same ``ufunc.at`` calls. Each batch then reads every row
  group of the metric it touches.
Only a selector with ``__name__="..."`` is batched: after a range function drops the metric name, series of one
metric still have distinct label sets, so no batch can hold a duplicate of another's row.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Iterator

import numpy as np
import promql_parser as pp

from ..limits.context import SAMPLE_BYTES, QueryContext
from ..model import METRIC_NAME, Labels, Matcher, SampleBlock
from ..storage.batch import SeriesSet
from ..storage.seam import SampleReader
from . import batch_held, compat, functions, held, parser
from .aggregations import aggregate, group_ids, group_sum, lost_cells
from .calls import OVER_TIME, RATE_LIKE
from .value import Series, drop_names, pick

# Range functions whose value for a series depends on that series' samples only.
PER_SERIES_RANGE_FUNCS = set(RATE_LIKE) | OVER_TIME | {
    "irate", "idelta", "changes", "resets", "deriv", "predict_linear", "quantile_over_time", "holt_winters",
    "double_exponential_smoothing"}
# Below this many samples a selection is one batch: a helper thread would cost more than it saves.
MIN_SPLIT_SAMPLES = 1_000_000
# What a series costs at each step of a batch, in raw samples' bytes: ~18 (series x step) arrays of 8 bytes
# while a range function runs (rangefuncs.py). Counted as one sample a step, a batch of a 1 h rate at a 30 s step
# held ~4x the memory its target allowed: 4 dashboard clients took a query process to ~1 GiB (bench.soak, 500 nodes).
STEP_SAMPLES = 8
# What a kept row costs at each step: its value and its mask (a plain selector's rows carry a sample time too).
KEPT_CELL_BYTES = 9
# Aggregations folded batch by batch into (group x step) accumulators.
STREAMED = {"sum", "count", "min", "max", "group"}


# Per-series instant functions: each output row comes from one input row, its value from that row's alone.
PER_SERIES_INSTANT = {"abs", "ceil", "floor", "exp", "sqrt", "ln", "log2", "log10", "sgn", "round", "clamp",
                      "clamp_min", "clamp_max", "deg", "rad", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                      "cosh", "tanh", "asinh", "acosh", "atanh"}
# ... and the two that rewrite labels: their rows may collide, which evaluate_batched checks first.
LABEL_FUNCS = {"label_replace", "label_join"}
# Vector-scalar operators act row by row (set operators take no scalar).
_SCALAR_OPS = {"+", "-", "*", "/", "%", "^", "atan2", "==", "!=", ">", "<", ">=", "<="}


def batchable_selector(expr) -> "pp.VectorSelector | pp.MatrixSelector | None":
    """The one selector an aggregation's argument reads, when it can be evaluated by series
    batches: a selector of one metric, or a per-series range function of one (its other
    arguments literal numbers), under any chain of row-by-row steps (per-series instant functions,
    label_replace/label_join, unary minus, an operator with a number)."""
    node = _below_row_steps(expr)
    if isinstance(node, pp.Call):
        if node.func.name not in PER_SERIES_RANGE_FUNCS:
            return None
        args = [parser.unwrap(a) for a in node.args]
        ranges = [a for a in args if isinstance(a, pp.MatrixSelector)]
        others = [a for a in args if not isinstance(a, pp.MatrixSelector)]
        if len(ranges) != 1 or not all(isinstance(a, pp.NumberLiteral) for a in others):
            return None
        node = ranges[0]
        selector = node.vector_selector
    elif isinstance(node, pp.VectorSelector):
        selector = node
    else:
        return None
    if not parser.names_one_metric(selector):
        return None
    return node


def _below_row_steps(expr):
    """``expr`` without the row-by-row steps on top of it (or a node batching does not take)."""
    node = parser.unwrap(expr)
    while True:
        if isinstance(node, pp.UnaryExpr):
            node = parser.unwrap(node.expr)
        elif isinstance(node, pp.Call) and node.func.name in PER_SERIES_INSTANT | LABEL_FUNCS:
            literal = pp.StringLiteral if node.func.name in LABEL_FUNCS else pp.NumberLiteral
            if not node.args or not all(isinstance(parser.unwrap(a), literal) for a in node.args[1:]):
                return None
            node = parser.unwrap(node.args[0])
        elif isinstance(node, pp.BinaryExpr) and parser.op_name(node).lower() in _SCALAR_OPS:
            lhs, rhs = parser.unwrap(node.lhs), parser.unwrap(node.rhs)
            if isinstance(rhs, pp.NumberLiteral):
                node = lhs
            elif isinstance(lhs, pp.NumberLiteral):
                node = rhs
            else:
                return None
        else:
            return node


def _rows_collide(expr, series: SeriesSet, dot_nl: bool) -> bool:
    """Would the label functions in ``expr``'s row-by-row steps give two of ``series`` one label set? Then
    rows of different batches would have to merge (or fail, as Prometheus does): evaluated whole instead.
    The functions themselves are asked, on zero-step rows (the metric's name dropped: rows of one metric
    stay distinct without it, and every step above a range function works without it)."""
    calls = [node for node in _row_steps(expr) if isinstance(node, pp.Call) and node.func.name in LABEL_FUNCS]
    if not calls or not len(series):
        return False
    rows = Series(drop_names(series.labels), np.zeros((len(series), 0)), np.zeros((len(series), 0), bool))
    for node in reversed(calls):  # innermost first
        args = [parser.unwrap(a).val for a in node.args[1:]]
        if METRIC_NAME in args:  # a step that reads or writes the name: not worth the thought
            return True
        if node.func.name == "label_replace":
            rows = functions.label_replace(rows, *args, dot_nl)
        else:
            rows = functions.label_join(rows, args[0], args[1], args[2:])
    return len(rows) != len(series)


def _row_steps(expr) -> list:
    """The row-by-row steps above the bottom node, outermost first."""
    steps = []
    node = parser.unwrap(expr)
    while node is not None and not isinstance(node, (pp.VectorSelector, pp.MatrixSelector)):
        if isinstance(node, pp.Call) and node.func.name in PER_SERIES_RANGE_FUNCS:
            break
        steps.append(node)
        node = _next_row_step(node)
    return steps


def _next_row_step(node):
    if isinstance(node, pp.UnaryExpr):
        return parser.unwrap(node.expr)
    if isinstance(node, pp.Call):
        if node.func.name in PER_SERIES_RANGE_FUNCS:
            return None
        return parser.unwrap(node.args[0])
    if isinstance(node, pp.BinaryExpr):
        lhs = parser.unwrap(node.lhs)
        return parser.unwrap(node.rhs) if isinstance(lhs, pp.NumberLiteral) else lhs
    return None


class FixedSelection:
    """A source whose selection is fixed to one batch of series (already selected and charged)."""

    def __init__(self, source: SampleReader, series: SeriesSet) -> None:
        self.source, self.series = source, series

    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None) -> SeriesSet:
        return self.series

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        return self.source.estimate_samples(series, start_ms, end_ms)

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        return self.source.read_samples(ids, start_ms, end_ms, ctx)


def evaluate_batched(engine, op: str, expr, selector, without: bool, names: list[str], param,
                     env) -> tuple[Series, np.ndarray]:
    """``op`` over ``expr`` (whose only selector is ``selector``), one batch of series at a time;
    and the points ``expr`` gives at each step (the aggregation's input, for promql/held.py)."""
    ctx = env.ctx
    matchers, start, end = engine.selector_window(selector, env)
    everything = engine.source.select_series(matchers, start, end, ctx)  # charges the series once
    # A batch may use a quarter of the memory the query has left (reading and evaluating it
    # takes a few times its raw size), and no more than the engine's batch size.
    # Batches evaluated side by side (promql/parallel.py) share that between them.
    workers = engine.parts.workers if engine.parts is not None else 1
    room = (ctx.max_bytes - ctx.bytes) // (4 * SAMPLE_BYTES)
    target = max(1, min(engine.batch_samples, room) // workers)
    steps = len(env.steps)
    # the storage lists one metric's series sorted, and says so
    label_order = (list(range(len(everything))) if everything.label_sorted
                   else sorted(range(len(everything)), key=everything.labels.__getitem__))
    if _rows_collide(expr, everything, compat.dot_matches_newline(engine.promql_compat)):
        cuts, by_id = [np.arange(len(everything))], False
        sorted_batches = everything.label_sorted  # the one batch lists the selection as it came
    else:
        # Batches of series adjacent in the table (by id) read only their row groups, where label-order batches read
        # every row group of the metric in each file, once per batch; their rows are kept and put back in label order
        # before one aggregation: the same rows in the same order as evaluating all at once.
        by_id = _kept_rows_fit(expr, everything, steps, ctx)
        cuts = _cuts(engine.source, everything, label_order, start, end, target, steps, workers, by_id)
        # a batch in label order lists its series in label order; one by id (positions in ascending order), when
        # the selection is in label order
        sorted_batches = everything.label_sorted or not by_id
    batches = _batches(everything, cuts, sorted_batches)
    inputs = np.zeros(steps, np.int64)
    if op in STREAMED and not by_id:
        acc = _Streamed(op, without, names, steps, compat.prometheus_3(engine.promql_compat))
        for s in _evaluate_each(engine, expr, batches, env, len(everything)):
            inputs += held.per_step(s, steps)
            acc.add(s)
            ctx.charge_points(acc.grown(), "aggregation")
        lost = acc.lost()
        if lost.any():  # Prometheus 3's compensated sum: the few cells that cancelled out, once more exactly
            again = _batches(everything, cuts, sorted_batches)
            acc.add_exactly(lost, _evaluate_each(engine, expr, again, env, len(everything)))
        return acc.result(), inputs
    parts = list(_evaluate_each(engine, expr, batches, env, len(everything), keep=True))
    for s in parts:
        inputs += held.per_step(s, steps)
    rows = _concat(parts, steps)
    return aggregate(op, _in_label_order(rows, parts, cuts, label_order) if by_id else rows, without, names, param,
                     compat.prometheus_3(engine.promql_compat)), inputs


def _kept_rows_fit(expr, everything: SeriesSet, steps: int, ctx: QueryContext) -> bool:
    """Whether every batch's rows may be kept until one aggregation at the end, in a quarter of what the query has
    left: then batches need not follow label order. Not with label functions among the row steps: the rows' label
    order is then no longer their series' (only a range function's or an operator's dropping of the one metric
    name, which keeps it)."""
    if any(isinstance(node, pp.Call) and node.func.name in LABEL_FUNCS for node in _row_steps(expr)):
        return False
    # rows of a plain selector carry their samples' times too (for timestamp()), a range function's do not
    cell = KEPT_CELL_BYTES if isinstance(_below_row_steps(expr), pp.Call) else KEPT_CELL_BYTES + 8
    return len(everything) * steps * cell <= (ctx.max_bytes - ctx.bytes) // 4


def _in_label_order(rows: Series, parts: list[Series], cuts: list[np.ndarray], label_order: list[int]) -> Series:
    """``rows`` (the batches' ``parts`` one after the other, each in label order) sorted by their labels. A batch that
    gave a row for each of its series (``cuts``: their positions in the selection) gave row j to the one j-th in
    label order, so when all did, the rows' places are their series' ranks in the selection's ``label_order``: no
    label is compared. Otherwise (a filter dropped rows) the labels are sorted (a merge of the batches' runs)."""
    if all(len(p) == len(c) for p, c in zip(parts, cuts)):
        rank = np.empty(len(label_order), np.int64)
        rank[np.array(label_order, np.int64)] = np.arange(len(label_order))
        order = np.argsort(np.concatenate([np.sort(rank[c]) for c in cuts]), kind="stable")
        return rows if (order == np.arange(len(order))).all() else rows.take(order.tolist())
    order = sorted(range(len(rows)), key=rows.labels.__getitem__)
    return rows if order == list(range(len(rows))) else rows.take(order)


def _cuts(source, everything, label_order: list[int], start: int, end: int, target_samples: int, steps: int,
          workers: int, by_id: bool) -> list[np.ndarray]:
    """``everything`` cut into batches of about ``target_samples`` each, in label order or (``by_id``) by
    series id: a batch of adjacent ids reads only the row groups holding them (files are sorted by metric and
    id), where one in label order holds ids from all over the metric. Each batch as its series' positions in
    ``everything``."""
    n = len(everything)
    if n == 0:
        return [np.arange(0)]
    order = np.argsort(everything.ids, kind="stable") if by_id else np.array(label_order, np.int64)
    # a series costs its raw samples and then, at each step, its window's bounds and a range function's
    # temporaries (first/last samples and times, extrapolation, the output: STEP_SAMPLES samples' bytes)
    per_series = source.estimate_samples(everything, start, end) / n + steps * STEP_SAMPLES
    size = max(1, int(target_samples // per_series))
    cuts = list(range(0, n, size))
    if workers > 1 and per_series * n >= MIN_SPLIT_SAMPLES and len(cuts) < workers + 1:
        # A small first batch (evaluated alone: it fills the sample cache, see _evaluate_each), then at least
        # one batch per core for the rest.
        first = -(-n // (4 * workers))
        rest = -(-(n - first) // workers)
        cuts = [0] + list(range(first, n, min(size, rest)))
    # a batch by id lists its series in the selection's order, one in label order in label order
    return [np.sort(order[a:b]) if by_id else order[a:b] for a, b in zip(cuts, cuts[1:] + [n])]


def _batches(everything, cuts: list[np.ndarray], label_sorted: bool) -> Iterator:
    kind = type(everything)
    for idx in cuts:
        yield kind(everything.ids[idx], pick(everything.labels, idx), label_sorted)


def _evaluate_each(engine, expr, batches, env, scan_series: int, keep: bool = False) -> Iterator[Series]:
    """Each batch's value of ``expr``, in order, batches evaluated side by side when the engine has
    spare cores; a batch's raw samples are released once it is evaluated (a kept batch stays
    charged as the points it holds). What the whole evaluation would hold (promql/batch_held.py)
    grows as batches come, in order, and is refused the moment it passes --query.max-samples.
    Each batch's reads say they are part of a selection of ``scan_series`` series (read/plan.py)."""
    ctx = env.ctx
    start = ctx.samples
    bottom = _below_row_steps(expr)
    step_nodes = {id(node) for node in _row_steps(expr) if isinstance(node, (pp.Call, pp.BinaryExpr))}
    tally = batch_held.Tally(expr, bottom, len(env.steps))

    def one(batch):
        part = ctx.part()  # charges the query, gives back only its own
        part.scan_series = scan_series
        inner = copy.copy(engine)
        inner.source = FixedSelection(engine.source, batch)
        recorder = batch_held.Recorder(inner, bottom, step_nodes, len(env.steps))
        try:
            s = inner.eval(expr, dataclasses.replace(env, ctx=part))
        finally:
            part.release_all()
        if keep:
            ctx.charge_points(s.values.size, "aggregation input")
        return s, recorder

    def taken(done) -> Series:
        s, recorder = done
        tally.add(recorder)
        peak, _ = tally.count()
        if start + peak > ctx.max_samples:
            ctx.count_held(start + peak, start, tally.first_over(ctx.max_samples - start) or "aggregation input")
        return s

    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        return
    # The first batch alone: a cold metric's read fills the sample cache for the whole metric, which the
    # batches after it then share (side by side, each would read and charge the files again).
    yield taken(one(first))
    yield from map(taken, map(one, batches) if engine.parts is None else engine.parts.map(one, batches))
    peak, after = tally.count()
    ctx.count_held(start + peak, start + after, "aggregation input")


def _concat(parts: list[Series], steps: int) -> Series:
    parts = [p for p in parts if len(p)]
    if not parts:
        return Series.empty(steps)
    if len(parts) == 1:
        return parts[0]
    sample_t = None
    if all(p.sample_t is not None for p in parts):
        sample_t = np.concatenate([p.sample_t for p in parts])
    return Series([l for p in parts for l in p.labels], np.concatenate([p.values for p in parts]),
                  np.concatenate([p.mask for p in parts]), sample_t)


class _Streamed:
    """sum/count/min/max/group folded row by row, as ``aggregations.aggregate`` does in one go. With
    ``compensate`` (Prometheus 3's sum), the group sums of |value| are kept too, to find the cells whose plain
    sum cancelled out (``lost``), which ``add_exactly`` adds again exactly, as ``aggregate`` does."""

    def __init__(self, op: str, without: bool, names: list[str], steps: int, compensate: bool) -> None:
        self.op, self.without, self.names, self.steps = op, without, names, steps
        self.compensate = compensate and op == "sum"
        self.keys: dict[Labels, int] = {}
        self.count = np.zeros((0, steps))
        self.out = np.zeros((0, steps))
        self.magnitude = np.zeros((0, steps))  # the group sums of |value| (compensate only)
        self._charged_rows = 0

    def add(self, s: Series) -> None:
        if not len(s):
            return
        gid = group_ids(s.labels, self.without, self.names, self.keys)
        self._grow(len(self.keys))
        m, v = s.mask, s.values
        g = len(self.count)
        self.count = group_sum(gid, g, m, into=self.count)
        if self.op == "sum":
            self.out = group_sum(gid, g, np.where(m, v, 0.0), into=self.out)
            if self.compensate:
                self.magnitude = group_sum(gid, g, np.where(m, np.abs(v), 0.0), into=self.magnitude)
        elif self.op in ("min", "max"):
            (np.fmin if self.op == "min" else np.fmax).at(self.out, gid, np.where(m, v, np.nan))

    def lost(self) -> np.ndarray:
        if not self.compensate:
            return np.zeros(self.out.shape, bool)
        return lost_cells(self.out, self.magnitude)

    def add_exactly(self, lost: np.ndarray, parts) -> None:
        """The sums of the ``lost`` cells, again from all the rows (``parts``, the same batches), exactly."""
        values: dict[tuple[int, int], list[float]] = {}
        cells = list(zip(*np.nonzero(lost)))
        for s in parts:
            gid = group_ids(s.labels, self.without, self.names, self.keys)
            for gg, k in cells:
                rows = np.flatnonzero((gid == gg) & s.mask[:, k])
                values.setdefault((gg, k), []).extend(s.values[rows, k].tolist())
        for (gg, k), vals in values.items():
            self.out[gg, k] = math.fsum(vals)

    def _grow(self, g: int) -> None:
        extra = g - len(self.count)
        if extra <= 0:
            return
        fill = np.nan if self.op in ("min", "max") else 0.0
        self.count = np.concatenate([self.count, np.zeros((extra, self.steps))])
        self.out = np.concatenate([self.out, np.full((extra, self.steps), fill)])
        self.magnitude = np.concatenate([self.magnitude, np.zeros((extra, self.steps))])

    def grown(self) -> int:
        """Points added to the accumulators since the last call (to charge them)."""
        rows, self._charged_rows = len(self.count) - self._charged_rows, len(self.count)
        return (3 if self.compensate else 2) * rows * self.steps

    def result(self) -> Series:
        present = self.count > 0
        if self.op == "count":
            out = self.count
        elif self.op == "group":
            out = np.ones_like(self.count)
        else:
            out = self.out
        return Series(list(self.keys), np.where(present, out, 0.0), present).compact()
