"""/api/v1/series, /labels, /label/<name>/values, /metadata: from the series table, bounded.

These are the calls that took Prometheus down (``/api/v1/series?match[]={le!=""}`` with no time
range). Here each one: has its own short deadline (--query.metadata-timeout), uses a default time
window when start/end are absent (--query.metadata-default-window), answers from the series table
only (never samples), honours Prometheus's ``limit`` and applies a server-side cap, truncating with
a ``warnings`` entry as Prometheus does for ``limit``.
"""

from __future__ import annotations

import urllib.parse

import orjson
import promql_parser as pp
from aiohttp import web

from ..appkeys import CONFIG, STORAGE
from ..cluster import head_json
from ..cluster import head_protocol
from ..errors import BadData
from ..http.params import now_s, parse_limit, parse_time, parse_tsdb_top, parse_tsdb_window, read_params
from ..http.response import success, success_json
from ..limits.query_text import QueryTextLimits
from ..model import Matcher, is_label_name
from ..promql import parser
from ..storage.catalog import stats
from .query import query_context
from .running import guarded, run_guarded
from .sources import peers_head_json, read_source




def parse_match(request: web.Request, params) -> list[list[Matcher]]:
    """Each ``match[]`` is a series selector; several are OR-ed."""
    sets = []
    limits = QueryTextLimits.from_config(request.app[CONFIG])
    for text in params.getall("match[]", []):
        limits.check(text, "match[]")
        try:
            expr = pp.parse(text)
        except (ValueError, BaseException) as err:  # the Rust parser may panic on odd input
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            raise BadData(f'invalid parameter "match[]": {err}') from None
        if not isinstance(expr, pp.VectorSelector):
            raise BadData(f'invalid parameter "match[]": {text!r} is not a series selector')
        ms = parser.matchers(expr)
        if all(m.matches_empty() for m in ms):
            raise BadData('invalid parameter "match[]": match[] must contain at least one non-empty matcher')
        sets.append(ms)
    return sets


def _window(request: web.Request, params) -> tuple[int, int]:
    cfg = request.app[CONFIG]
    end = parse_time(params.get("end"), "end", default=now_s())
    start = parse_time(params.get("start"), "start", default=end - cfg.query_metadata_default_window)
    if end < start:
        raise BadData('invalid parameter "end": end timestamp must not be before start time')
    return int(start * 1000), int(end * 1000)


def _cap(request: web.Request, params, server_cap: int) -> tuple[int, bool]:
    """(effective limit, whether it is the user's). One more is fetched to detect truncation."""
    user = parse_limit(params.get("limit"))
    if user is not None and user <= server_cap:
        return user, True
    return server_cap, False


def _truncation_warning(by_user: bool, limit: int, setting: str) -> str:
    if by_user:
        return "results truncated due to limit"
    return f"results truncated to {limit} by the server (raise {setting} or narrow match[] and the time range)"


async def series(request: web.Request) -> web.Response:
    params = await read_params(request)
    sets = parse_match(request, params)
    if not sets:
        raise BadData('invalid parameter "match[]": no match[] parameter provided')
    start_ms, end_ms = _window(request, params)
    limit, by_user = _cap(request, params, request.app[CONFIG].query_max_metadata_series)
    ctx = query_context(request, params.get("timeout"), metadata=True)
    ctx.max_series = max(ctx.max_series, (limit + 1) * len(sets))  # the cap truncates; it does not fail
    storage, warnings = read_source(request, request.app[STORAGE], params, samples=False)

    def work():
        # The first of the union in label order, as Prometheus's merged series set: the first of each set.
        seen: set = set()
        for ms in sets:
            seen.update(storage.select_series(ms, start_ms, end_ms, ctx, limit=limit + 1).labels)
        return sorted(seen)

    found = await run_guarded(request, "series", ctx, work)
    if len(found) > limit:
        found = found[:limit]
        warnings.append(_truncation_warning(by_user, limit, "--query.max-metadata-series"))
    return success([dict(lb) for lb in found], warnings)


async def label_names(request: web.Request) -> web.Response:
    return await _label_listing(request, "labels",
                                lambda storage, ms, start_ms, end_ms, ctx: storage.label_names(ms, start_ms, end_ms, ctx))


async def label_values(request: web.Request) -> web.Response:
    name = _label_name(request)
    return await _label_listing(request, "label_values", lambda storage, ms, start_ms, end_ms, ctx:
                                storage.label_values(name, ms, start_ms, end_ms, ctx))


def _label_name(request: web.Request) -> str:
    """The <name> of /label/<name>/values, refused like Prometheus 2.42 does when not a label name."""
    segment = request.rel_url.raw_path.split("/")[-2]
    data = urllib.parse.unquote_to_bytes(segment)
    try:
        name = data.decode("utf-8")
    except UnicodeDecodeError:
        name = None
    if name is None or not is_label_name(name):
        raise BadData(f"invalid label name: {go_quote(data)}")
    return name


def go_quote(data: bytes) -> str:
    """Go's %q of a string: printable text kept, invalid UTF-8 bytes as \\xNN."""
    out = ['"']
    i = 0
    while i < len(data):
        for n in (1, 2, 3, 4):  # the shortest valid UTF-8 sequence starting here
            try:
                ch = data[i:i + n].decode("utf-8")
                break
            except UnicodeDecodeError:
                ch = None
        if ch is None:
            out.append(f"\\x{data[i]:02x}")
            i += 1
            continue
        out.append({'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t"}.get(ch, ch if ch.isprintable()
                   else ch.encode("unicode_escape").decode()))
        i += len(ch.encode("utf-8"))
    return "".join(out) + '"'


async def _label_listing(request: web.Request, kind: str, fetch) -> web.Response:
    """/labels and /label/<n>/values: the union over match[] sets, sorted, capped with a warning."""
    params = await read_params(request)
    sets = parse_match(request, params) or [[]]
    start_ms, end_ms = _window(request, params)
    if head_protocol.asks_for_head(request.rel_url.query):
        return await _head_listing(request, params, sets, start_ms, end_ms, fetch)
    limit, by_user = _cap(request, params, request.app[CONFIG].query_max_label_values)
    ctx = query_context(request, params.get("timeout"), metadata=True)
    storage, warnings = read_source(request, request.app[STORAGE], params, samples=False)

    def work():
        found: set[str] = set()
        for ms in sets:
            found.update(fetch(storage, ms, start_ms, end_ms, ctx))
        return sorted(found)

    found = await run_guarded(request, kind, ctx, work)
    if len(found) > limit:
        found = found[:limit]
        warnings.append(_truncation_warning(by_user, limit, "--query.max-label-values"))
    return success(found, warnings)


async def _head_listing(request: web.Request, params, sets, start_ms: int, end_ms: int, fetch) -> web.Response:
    """?scope=head: the names or values of this process's own series in the window, sorted, the first ``limit``
    (an ingest shard's, for its query process: every series it writes, flushed or not, so a series whose recent
    samples are not in the table yet is counted in the window). Part of the asking call (head_protocol.py)."""
    cfg = request.app[CONFIG]
    limit = parse_limit(params.get("limit"))
    ctx = head_protocol.read_context(request.headers, cfg.query_metadata_timeout, cfg.query_max_memory_per_query)
    storage = request.app[STORAGE]
    head_protocol.refuse_until_ready(storage)

    def work():
        found: set[str] = set()
        for ms in sets:
            found.update(fetch(storage, ms, start_ms, end_ms, ctx))
        return sorted(found)[:limit]

    async with guarded(request, "labels", ctx, slot=False) as run:
        return success(await run(work))


async def metadata(request: web.Request) -> web.Response:
    params = await read_params(request)
    limit = parse_limit(params.get("limit"))
    metric = params.get("metric") or None
    storage = request.app[STORAGE]
    if head_protocol.asks_for_head(request.rel_url.query):  # the asking query merges it with others': no limit here
        head_protocol.refuse_until_ready(storage)
        return success(storage.metadata(metric, None))
    asked = [("metric", metric)] if metric else []
    ctx = query_context(request, params.get("timeout"), metadata=True)
    peers, warnings = await peers_head_json(request, params, "/api/v1/metadata", asked, ctx, "metadata")
    if not peers:
        return success(storage.metadata(metric, limit), warnings)
    return success(head_json.merge_metadata([storage.metadata(metric, None), *peers], limit), warnings)


async def buildinfo(request: web.Request) -> web.Response:
    from .. import __version__

    # No "features" field: Grafana then treats us as Prometheus and picks APIs by version.
    return success({"version": "2.42.0", "revision": f"metricsgw-{__version__}", "branch": "metricsgw",
                    "buildUser": "metricsgw", "buildDate": "", "goVersion": "python"})


async def tsdb_status(request: web.Request) -> web.Response:
    """Prometheus's cardinality page, over the head's series, or with ``start``/``end`` (or VictoriaMetrics'
    ``date``) over every series with a sample in that window, whatever partition holds it; VictoriaMetrics'
    ``topN``, ``focusLabel`` and one ``match[]`` narrow it."""
    params = await read_params(request)
    limit, focus = parse_tsdb_top(params)
    start_ms, end_ms = parse_tsdb_window(params)
    sets = parse_match(request, params)
    if len(sets) > 1:
        raise BadData('invalid parameter "match[]": give at most one series selector to count')
    matchers = sets[0] if sets else None
    storage = request.app[STORAGE]
    if head_protocol.asks_for_head(request.rel_url.query):  # a shard's own series, whole: the front adds them up
        head_protocol.refuse_until_ready(storage)
        cfg = request.app[CONFIG]
        ctx = head_protocol.read_context(request.headers, cfg.query_metadata_timeout, cfg.query_max_memory_per_query)
        async with guarded(request, "tsdb_status", ctx, slot=False) as run:  # part of the front's answer
            # orjson: the whole counts are a few MB at the seed's scale (json.dumps took ~0.3 s of them)
            return success_json(orjson.dumps(await run(lambda: storage.tsdb_counts(start_ms, end_ms, matchers, ctx))))
    ctx = query_context(request, params.get("timeout"), metadata=True)
    return success(await run_guarded(request, "tsdb_status", ctx, lambda: stats.render(
        [storage.tsdb_counts(start_ms, end_ms, matchers, ctx)], limit, focus)))
