"""/api/v1/query, /api/v1/query_range, /api/v1/format_query."""

from __future__ import annotations

import time

from aiohttp import web

from .. import testhooks
from ..appkeys import BLOCKED, CONFIG, ENGINE, FLIGHTS, MEMORY, RESULTS_CACHE, TELEMETRY
from ..errors import BadData, NotSupported
from ..http.params import now_s, parse_bool, parse_step, parse_time, parse_timeout, read_params
from ..http.response import success, success_json
from ..limits.context import QueryContext
from ..limits.query_text import QueryTextLimits
from ..promql import cached_range, parser
from ..promql.render import point_count, render_json
from .observed import Observation, observed
from .running import run_guarded
from .sources import read_source


def query_context(request: web.Request, timeout_param: str | None, metadata: bool = False) -> QueryContext:
    cfg = request.app[CONFIG]
    budgets = dict(max_samples=cfg.query_max_samples, max_series=cfg.query_max_series,
                   max_bytes=cfg.query_max_memory_per_query, pool=request.app[MEMORY])
    if metadata:
        return QueryContext.for_request(parse_timeout(timeout_param), cfg.query_metadata_timeout,
                                        timeout_setting="--query.metadata-timeout", **budgets)
    return QueryContext.for_request(parse_timeout(timeout_param), cfg.query_timeout, **budgets)


def query_text(request: web.Request, params) -> str:
    """The ``query`` parameter, within --query.max-length/-depth/-terms (checked before parsing)."""
    q = params.get("query")
    if q is None or q.strip() == "":
        raise BadData('invalid parameter "query": 1:1: parse error: no expression found in input')
    QueryTextLimits.from_config(request.app[CONFIG]).check(q)
    return q


async def instant_query(request: web.Request) -> web.Response:
    async with observed(request) as obs:
        params = await read_params(request)
        obs.query = params.get("query")
        query = query_text(request, params)
        t = parse_time(params.get("time"), "time", default=now_s())
        obs.window(t, t)
        ctx = query_context(request, params.get("timeout"))
        obs.track(ctx)
        request.app[BLOCKED].check(query, None, None)
        engine = request.app[ENGINE]
        source, warnings = read_source(request, engine.source, params)
        engine = engine.over(source)
        t0 = time.perf_counter()

        def work():
            testhooks.hold("evaluation", query, ctx)  # test-only; off unless METRICSGW_TEST_HOLD_DIR is set
            return render_charged(engine.instant(query, t, ctx), ctx)

        value = await run_guarded(request, "query", ctx, work)
        request.app[TELEMETRY].query_duration.labels("query").observe(time.perf_counter() - t0)
        return obs.answered(success_json(value, max_bytes=request.app[CONFIG].query_max_response_bytes,
                                         warnings=warnings + ctx.warnings, infos=ctx.infos))


async def range_query(request: web.Request) -> web.Response:
    async with observed(request) as obs:
        params = await read_params(request)
        obs.query = params.get("query")
        return obs.answered(await _range_query(request, params, obs))


async def _range_query(request: web.Request, params, obs: Observation) -> web.Response:
    query = query_text(request, params)
    start = parse_time(params.get("start"), "start")
    end = parse_time(params.get("end"), "end")
    if end < start:
        raise BadData('invalid parameter "end": end timestamp must not be before start time')
    step = parse_step(params.get("step"))
    if step <= 0:
        raise BadData('invalid parameter "step": zero or negative query resolution step widths are not accepted. '
                      "Try a positive integer")
    obs.window(start, end, step)
    cfg = request.app[CONFIG]
    # Prometheus divides whole durations (integer nanoseconds): 11000.5 points pass, 11001 do not.
    if int(round((end - start) * 1e9)) // int(round(step * 1e9)) > cfg.query_max_points_per_series:
        too_many = BadData(f'invalid parameter "step": exceeded maximum resolution of '
                           f'{cfg.query_max_points_per_series:,} points per timeseries. '
                           "Try decreasing the query resolution (?step=XX)")
        too_many.setting = "--query.max-points-per-series"  # Prometheus's words name no flag; the log names ours
        raise too_many
    nocache = parse_bool(params.get("nocache"), "nocache")
    ctx = query_context(request, params.get("timeout"))
    obs.track(ctx)
    request.app[BLOCKED].check(query, end - start, step)
    engine = request.app[ENGINE]
    source, warnings = read_source(request, engine.source, params)
    engine = engine.over(source)
    cache = None if nocache else request.app[RESULTS_CACHE]
    t0 = time.perf_counter()

    def work():
        testhooks.hold("evaluation", query, ctx)
        if cache is None:
            return render_charged(engine.range(query, start, end, step, ctx), ctx)
        return cached_range.range_query(engine, cache, query, start, end, step, ctx, round(time.time() * 1000),
                                        storable=lambda: not (warnings or ctx.warnings or ctx.infos),
                                        charge=lambda points, series: charge_json(points, series, ctx))

    async def evaluate() -> bytes:
        return await run_guarded(request, "query_range", ctx, work)

    if cache is None:
        value = await evaluate()
    else:  # the same query over the same steps, asked meanwhile by another screen: one evaluation
        value = await request.app[FLIGHTS].run((query, start, end, step, tuple(params.getall("partial_response", []))),
                                               ctx.remaining(), evaluate)
    request.app[TELEMETRY].query_duration.labels("query_range").observe(time.perf_counter() - t0)
    return success_json(value, max_bytes=cfg.query_max_response_bytes, warnings=warnings + ctx.warnings,
                        infos=ctx.infos)


# Rendering a point builds a float, a value string and a tuple (~140 bytes of Python objects)
# before orjson writes its ~25 bytes of JSON.
JSON_POINT_BYTES = 160
JSON_SERIES_BYTES = 512


def render_charged(value, ctx: QueryContext) -> bytes:
    """The result as JSON, its size charged to the query's memory before it is built."""
    charge_json(point_count(value), len(getattr(value, "labels", ())), ctx)
    return render_json(value)


def charge_json(points: int, series: int, ctx: QueryContext) -> None:
    ctx.charge_bytes(JSON_POINT_BYTES * points + JSON_SERIES_BYTES * series, "rendering JSON")


async def format_query(request: web.Request) -> web.Response:
    params = await read_params(request)
    expr, trims = request.app[ENGINE].parse(query_text(request, params))  # as --query.promql-compat reads it
    if trims:
        raise NotSupported("formatting the trim operators </ and >/ (the parser package cannot write them)")
    return success(parser.prettify(expr))
