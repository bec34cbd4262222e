"""The Queries page's data: the queries running now (and an administrator's cancel), the recent slow, refused,
timed-out, canceled and failed ones, and VictoriaMetrics' top queries.

- ``GET /api/v1/status/running_queries``: this process's running queries (the front merges its query processes'
  lists: procs/queries.py).
- ``POST /api/v1/admin/cancel_query?id=ID``: cancels one (an admin endpoint: behind --web.enable-lifecycle, and not
  for --web.read-only-users, as /-/reload; metricsgw/web/middleware.py).
- ``GET /api/v1/status/recent_queries[?kind=slow&kind=refused...][&limit=N]`` and
  ``GET /api/v1/status/top_queries[?topN=20][&maxLifetime=10m]``: from the query log's owner (``QUERY_LOG``: the
  single process, or the front).
"""

from __future__ import annotations

import time

from aiohttp import web

from ..appkeys import QUERY_LOG, RUNNING
from ..errors import BadData, NotFound
from ..http.params import parse_limit, parse_step, read_params
from ..http.response import success
from ..querylog.journal import RECENT_KINDS

TOP_N = 20  # VictoriaMetrics' defaults
MAX_LIFETIME_S = 600.0
CANCELED_BY = "canceled by an administrator (/api/v1/admin/cancel_query)"


async def running_queries(request: web.Request) -> web.Response:
    return success(request.app[RUNNING].listing())


async def cancel_query(request: web.Request) -> web.Response:
    params = await read_params(request)
    text = params.get("id", "")
    if not text.isdigit():
        raise BadData(f'invalid parameter "id": {text!r} is not the id of a running query (see '
                      "/api/v1/status/running_queries)")
    if not request.app[RUNNING].cancel(int(text), CANCELED_BY):
        raise NotFound(f"no running query has id {text}: it may have ended")
    return success({"id": text, "canceled": True})


async def recent_queries(request: web.Request) -> web.Response:
    params = await read_params(request)
    kinds = params.getall("kind", []) or list(RECENT_KINDS)
    unknown = sorted(set(kinds) - set(RECENT_KINDS))
    if unknown:
        raise BadData(f'invalid parameter "kind": {", ".join(unknown)} (one of {", ".join(RECENT_KINDS)})')
    query_log = request.app[QUERY_LOG]
    limit = parse_limit(params.get("limit")) or query_log.journal.recent_size
    return success(query_log.journal.recent_lists(list(dict.fromkeys(kinds)), limit))


async def top_queries(request: web.Request) -> web.Response:
    """VictoriaMetrics' answer, field for field (its UI's Top Queries page reads it), without an envelope as
    there; its settings' fields carry this gateway's equivalents."""
    params = await read_params(request)
    top_n = _top_n(params.get("topN"))
    max_lifetime = parse_step(params.get("maxLifetime"), "maxLifetime") if params.get("maxLifetime") else MAX_LIFETIME_S
    query_log = request.app[QUERY_LOG]
    body = {"topN": str(top_n), "maxLifetime": f"{max_lifetime:g}s",
            "search.queryStats.lastQueriesCount": query_log.journal.last_queries,
            "search.queryStats.minQueryDuration": "0s", "search.queryStats.minQueryMemoryUsage": "0B",
            **query_log.journal.top(top_n, max_lifetime, time.time())}
    return web.json_response(body)


def _top_n(text: str | None) -> int:
    if not text:
        return TOP_N
    try:
        n = int(text)
    except ValueError:
        raise BadData(f'invalid parameter "topN": cannot parse {text!r} as a number') from None
    if n < 0:
        raise BadData('invalid parameter "topN": must be non-negative')
    return n
