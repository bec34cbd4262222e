"""The in-memory double answering the query API's calls: the engine over MemSource in this process, its value
rendered as the API renders it (promql/render.py) with the annotations the API adds, and its errors as the API
types them (errors.py)."""

from __future__ import annotations

import orjson

from metricsgw.config import parse_duration
from metricsgw.errors import GatewayError
from metricsgw.limits.context import QueryContext
from metricsgw.promql.render import render_json


def answer(engine, path: str, params: dict) -> tuple[int, dict]:
    """(status, body) of /api/v1/query or /api/v1/query_range with ``params``, annotations included."""
    ctx = QueryContext()
    try:
        if path == "/api/v1/query":
            value = engine.instant(params["query"], float(params["time"]), ctx)
        else:
            value = engine.range(params["query"], float(params["start"]), float(params["end"]),
                                 parse_duration(params["step"]), ctx)
    except GatewayError as err:
        return err.status, {"status": "error", "errorType": err.error_type, "error": str(err)}
    body = {"status": "success", "data": orjson.loads(render_json(value))}
    body.update({k: v for k, v in (("warnings", ctx.warnings), ("infos", ctx.infos)) if v})
    return 200, body
