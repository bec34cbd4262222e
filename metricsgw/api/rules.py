"""GET /api/v1/rules and /api/v1/alerts: the configured ruler's groups and alerts, as Prometheus answers.

metricsgw evaluates no rules itself: a ruler (vmalert or Prometheus) does, querying metricsgw and
writing recordings back by remote write. These endpoints show what that ruler reports
(ruler/client.py fetches, ruler/shape.py rebuilds Prometheus's exact shape and filters), or empty
lists when no ``--rules.ruler-url`` is set, so Grafana's rule and alert views work either way.
"""

from __future__ import annotations

from aiohttp import web

from ..appkeys import RULER
from ..http.params import read_params
from ..http.response import success
from ..ruler.shape import active_alerts, parse_filter, select
from .metadata import parse_match


async def rules(request: web.Request) -> web.Response:
    form = await read_params(request)
    flt = parse_filter(request.query, form, parse_match(request, form))  # bad parameters: 400, ruler or not
    ruler = request.app[RULER]
    groups = await ruler.groups() if ruler is not None else []
    return success(select(groups, flt))


async def alerts(request: web.Request) -> web.Response:
    ruler = request.app[RULER]
    groups = await ruler.groups() if ruler is not None else []
    return success({"alerts": active_alerts(groups)})
