"""/api/v1/query_exemplars: the stored exemplars of every series a query's selectors select.

As Prometheus 2.42's queryExemplars: the query is parsed, its vector selectors extracted
(parser.ExtractSelectors), and the exemplars in [start, end] of the series any selector matches
returned, grouped by series in label order, each series' exemplars in time order. A query
without selectors gets 204 No Content (2.42 has no data to send and writes no body). Selection and reads run guarded, with a query's budgets.
With --cluster.peers (a query process: its gateway's shards) the peers' exemplars not yet in the table come
from their ``?scope=head`` answer, merged with the local ones (cluster/head_json.py).
"""

from __future__ import annotations

import numpy as np
import promql_parser as pp
from aiohttp import web

from ..appkeys import CONFIG, MEMORY, STORAGE
from ..cluster import head_json
from ..cluster import head_protocol
from ..errors import BadData
from ..http.params import MAX_TIME_S, MIN_TIME_S, parse_time, read_params
from ..http.response import success
from ..model import labels_from_key
from ..promql import parser
from ..promql.format import format_json
from ..storage.read.recent import RecentView
from .query import query_context, query_text
from .running import guarded, run_guarded
from .sources import peers_head_json

_CHILDREN = {pp.ParenExpr: ("expr",), pp.UnaryExpr: ("expr",), pp.BinaryExpr: ("lhs", "rhs"),
             pp.AggregateExpr: ("expr", "param"), pp.SubqueryExpr: ("expr",),
             pp.MatrixSelector: ("vector_selector",)}


def selectors(node) -> list:
    """Every vector selector of an expression, in the order they appear."""
    if isinstance(node, pp.VectorSelector):
        return [node]
    if isinstance(node, pp.Call):
        return [s for arg in node.args for s in selectors(arg)]
    out = []
    for attr in _CHILDREN.get(type(node), ()):
        child = getattr(node, attr, None)
        if child is not None:
            out += selectors(child)
    return out


def _ts(t_ms: int):
    return t_ms // 1000 if t_ms % 1000 == 0 else t_ms / 1000.0


def find(storage, matcher_sets: list, start_ms: int, end_ms: int, ctx) -> list[dict]:
    by_sid: dict[int, tuple] = {}
    for ms in matcher_sets:
        ss = storage.select_series(ms, start_ms, end_ms, ctx)
        by_sid.update(zip(ss.ids.tolist(), ss.labels))
    if not by_sid:
        return []
    block = storage.read_exemplars(np.array(list(by_sid), np.int64), start_ms, end_ms, ctx)
    out = []
    labels = block.labels.to_pylist()
    starts = np.flatnonzero(np.r_[True, block.sid[1:] != block.sid[:-1]]) if len(block) else []
    ends = list(starts[1:]) + [len(block)]
    for a, b in zip(starts, ends):
        series = by_sid[int(block.sid[a])]
        out.append((series, {"seriesLabels": dict(series), "exemplars": [
            {"labels": dict(labels_from_key(labels[i])), "value": format_json(float(block.v[i])),
             "timestamp": _ts(int(block.t[i]))} for i in range(a, b)]}))
    return [entry for _, entry in sorted(out, key=lambda e: e[0])]


async def query_exemplars(request: web.Request) -> web.Response:
    params = await read_params(request)
    start = parse_time(params.get("start"), "start", default=MIN_TIME_S)
    end = parse_time(params.get("end"), "end", default=MAX_TIME_S)
    if end < start:
        raise BadData("end timestamp must not be before start timestamp")  # Prometheus 2.42's text
    found = selectors(parser.parse(query_text(request, params)))
    if not found:
        return web.Response(status=204)
    matcher_sets = [parser.matchers(s) for s in found]
    storage = request.app[STORAGE]
    start_ms, end_ms = int(round(start * 1000)), int(round(end * 1000))
    if head_protocol.asks_for_head(request.rel_url.query):  # a query asks for what is not in the table yet
        cfg = request.app[CONFIG]
        ctx = head_protocol.read_context(request.headers, cfg.query_timeout, cfg.query_max_memory_per_query,
                                         request.app[MEMORY])
        head_protocol.refuse_until_ready(storage)
        view = RecentView(storage)
        async with guarded(request, "query_exemplars", ctx, slot=False) as run:  # part of the asking query
            found_head = await run(lambda: find(view, matcher_sets, start_ms, end_ms, ctx))
        resp = success(found_head)
        resp.headers[head_protocol.TABLE_VERSION_HEADER] = str(view.table_version)
        return resp
    ctx = query_context(request, params.get("timeout"))
    asked = [(k, v) for k, v in params.items() if k in ("query", "start", "end")]
    peers, warnings = await peers_head_json(request, params, "/api/v1/query_exemplars", asked, ctx, "exemplars")
    local = await run_guarded(request, "query_exemplars", ctx,
                              lambda: find(storage, matcher_sets, start_ms, end_ms, ctx))
    return success(head_json.merge_exemplars([local, *peers]) if peers else local, warnings)
