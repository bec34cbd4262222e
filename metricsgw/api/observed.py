"""What every PromQL query becomes for the query log: listed while it runs, recorded when it ends.

``async with observed(request) as obs:`` wraps a query handler. The handler tells ``obs`` what it learns as it
goes (the query's text, its window, its ``QueryContext``, its answer); whatever way the block ends, an answer, an
error or the client hanging up, one ``QueryRecord`` is made of it and given to the app's ``QUERY_RECORDS`` (the
process's own query log, or the sender to the front's: querylog/channel.py). A request without a query text
(nothing to name) is not recorded.
"""

from __future__ import annotations

import socket
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

from aiohttp import web

from ..appkeys import QUERY_RECORDS, RUNNING
from ..querylog.record import CLIENT_ADDRESS_HEADER, QueryRecord, Source, grafana_headers, outcome
from ..querylog.running import RunningQuery

MAX_USER_AGENT_CHARS = 256


def source_of(request: web.Request) -> Source:
    """Who sent ``request``: its peer, or, for a request the front passed on over this process's Unix socket, the
    address the front names (the only way such a request comes)."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is not None and sock.family == socket.AF_UNIX:
        client = request.headers.get(CLIENT_ADDRESS_HEADER, "")
    else:
        client = request.remote or ""
    return Source(client, request.method, request.path, request.headers.get("User-Agent", "")[:MAX_USER_AGENT_CHARS],
                  grafana_headers(request.headers))


class Observation:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.since = time.monotonic()
        self.source = source_of(request)
        self.query: str | None = None
        self.start: float | None = None
        self.end: float | None = None
        self.step = 0.0
        self.ctx = None
        self.response_bytes = 0
        self._running: int | None = None

    def window(self, start: float, end: float, step: float = 0.0) -> None:
        self.start, self.end, self.step = start, end, step

    def track(self, ctx) -> None:  # noqa: ANN001 (limits.context.QueryContext)
        """From now on the query is listed as running (cancellable through ``ctx``)."""
        self.ctx = ctx
        self._running = self.request.app[RUNNING].add(
            RunningQuery(self.query or "", self.source, self.start, self.end, self.step, ctx, self.since))

    def answered(self, response: web.Response) -> web.Response:
        self.response_bytes = len(response.body)
        return response

    def finish(self, err: BaseException | None) -> None:
        if self._running is not None:
            self.request.app[RUNNING].remove(self._running)
        if self.query is None:
            return
        ended = time.monotonic()
        ctx = self.ctx
        status, limit = outcome(err, ctx.timeout_setting if ctx is not None else "--query.timeout")
        admitted = ctx.admitted if ctx is not None else None
        error = "" if err is None else (str(err) or "the client went away")  # CancelledError says nothing
        self.request.app[QUERY_RECORDS](QueryRecord(
            query=self.query, source=self.source, ts=time.time(), status=status, limit=limit, error=error,
            start=self.start, end=self.end, step=self.step, total_s=ended - self.since,
            queue_s=(admitted - ctx.started) if admitted is not None else 0.0,
            eval_s=(ended - admitted) if admitted is not None else 0.0,
            samples=ctx.loaded_samples if ctx is not None else 0, peak_samples=ctx.peak_samples if ctx is not None else 0,
            peak_bytes=ctx.peak_bytes if ctx is not None else 0, response_bytes=self.response_bytes))


@asynccontextmanager
async def observed(request: web.Request) -> AsyncIterator[Observation]:
    obs = Observation(request)
    try:
        yield obs
    except BaseException as err:  # asyncio's CancelledError too: the client hung up, the query is canceled
        obs.finish(err)
        raise
    obs.finish(None)
