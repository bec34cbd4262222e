"""A range query through the results cache: the cached steps read, the others evaluated, the whole joined."""

from __future__ import annotations

from collections.abc import Callable

from ..limits.context import QueryContext
from . import matrix_parts, parser
from .engine import Engine
from .reach import reach_ms
from .results_cache import ResultsCache
from .value import Value


def range_query(engine: Engine, cache: ResultsCache, query: str, start_s: float, end_s: float, step_s: float,
                ctx: QueryContext, now_ms: int, storable: Callable[[], bool]) -> Value:
    """``Engine.range``'s answer, with the steps the cache holds taken from it. ``storable()``, asked after the
    evaluation, says whether the answer may be kept (no warnings)."""
    start, end, step = round(start_s * 1000), round(end_s * 1000), round(step_s * 1000)
    reach = reach_ms(parser.parse(query), engine.lookback_ms, engine.subquery_step_ms) if step > 0 else None
    found = None if reach is None else cache.lookup((query, step, start % step), start, end, step, reach, now_ms)
    if found is None:
        return engine.range(query, start_s, end_s, step_s, ctx)
    last = start + (end - start) // step * step  # the query's last step (``end`` may fall between steps)
    if found.held is None:
        runs = [(start, end)]
    else:
        runs = ([(start, found.lo - step)] if start < found.lo else []) + \
               ([(found.hi + step, end)] if found.hi < last else [])
    parts = [engine.range(query, a / 1000, b / 1000, step_s, ctx) for a, b in runs]
    if any(p.hist_rows for p in parts):  # native histograms are not cached: answer as one evaluation
        return parts[0] if runs == [(start, end)] else engine.range(query, start_s, end_s, step_s, ctx)
    answer = matrix_parts.join(([found.held] if found.held is not None else []) + parts)
    evaluated = sum((b - a) // step + 1 for a, b in runs)
    cache.note((end - start) // step + 1 - evaluated, evaluated)
    if storable():
        cache.store((query, step, start % step), start, end, step, answer, found.marks, now_ms)
    return answer
