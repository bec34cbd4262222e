"""A range query through the results cache: the cached steps read, the others evaluated, the whole joined and
written as JSON, the cached part from the pieces the cache keeps rendered (render.py: byte for byte what one
evaluation's answer renders to)."""

from __future__ import annotations

from collections.abc import Callable

from ..limits.context import QueryContext
from . import matrix_parts
from .engine import Engine
from .reach import reach_ms
from .render import matrix_json, metric_json, point_count, point_pieces, render_json
from .results_cache import ResultsCache, Rows
from .value import Matrix, Value

# (points, series) of the answer: charged to the query's memory before its JSON is built
Charge = Callable[[int, int], None]


def range_query(engine: Engine, cache: ResultsCache, query: str, start_s: float, end_s: float, step_s: float,
                ctx: QueryContext, now_ms: int, storable: Callable[[], bool], charge: Charge) -> bytes:
    """The JSON ``data`` of ``Engine.range``'s answer, with the steps the cache holds taken from it.
    ``storable()``, asked after the evaluation, says whether the answer may be kept (no warnings)."""
    start, end, step = round(start_s * 1000), round(end_s * 1000), round(step_s * 1000)
    reach = reach_ms(engine.parse(query)[0], engine.lookback_ms, engine.subquery_step_ms) if step > 0 else None
    found = None if reach is None else cache.lookup((query, step, start % step), start, end, step, reach, now_ms)
    if found is None:
        return _rendered(engine.range(query, start_s, end_s, step_s, ctx), charge)
    last = start + (end - start) // step * step  # the query's last step (``end`` may fall between steps)
    if found.held is None:
        before, after = [(start, end)], []
    else:
        before = [(start, found.lo - step)] if start < found.lo else []
        after = [(found.hi + step, end)] if found.hi < last else []
    runs = before + after
    parts = [engine.range(query, a / 1000, b / 1000, step_s, ctx) for a, b in runs]
    if any(p.hist_rows for p in parts):  # native histograms are not cached: answer as one evaluation
        whole = parts[0] if runs == [(start, end)] else engine.range(query, start_s, end_s, step_s, ctx)
        return _rendered(whole, charge)
    evaluated = sum((b - a) // step + 1 for a, b in runs)
    cache.note((last - start) // step + 1 - evaluated, evaluated)
    held = [found.held] if found.held is not None else []
    if storable() and cache.worth_storing((query, step, start % step), start, end, step, now_ms):
        answer = matrix_parts.join(parts[:len(before)] + held + parts[len(before):])
        cache.store((query, step, start % step), start, end, step, answer, found.marks, now_ms)
    pieces = [_rows(p) for p in parts[:len(before)]] + ([found.rows] if held else []) + \
             [_rows(p) for p in parts[len(before):]]  # each series' pieces in time order
    labels = sorted({l for rows in pieces for l in rows})
    points = sum(len(p.v) for p in parts + held)
    charge(points, len(labels))
    return matrix_json([(next(r[l][0] for r in pieces if l in r), [r[l][1] for r in pieces if l in r])
                        for l in labels])


def _rows(m: Matrix) -> Rows:
    blob, starts = point_pieces(m)
    offs = starts[m.offsets].tolist()
    return {l: (metric_json(l), blob[offs[i]:offs[i + 1]]) for i, l in enumerate(m.labels)}


def _rendered(value: Value, charge: Charge) -> bytes:
    charge(point_count(value), len(getattr(value, "labels", ())))
    return render_json(value)
