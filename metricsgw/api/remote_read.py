"""POST /api/v1/read: Prometheus remote read, sampled or streamed, behind the query guard.

Orchestration only: remote/read_codec.py decodes the request and encodes the answer, storage selects
series (``select_series``) and reads samples (``read_samples``) through its one read seam. A
read holds a remote-read slot (--storage.remote.read-concurrent-limit) and a query slot, has the
query deadline, the query's sample and series budgets, and stops when the client goes away.

Status codes as Prometheus's read handler: 400 for a request it cannot decode, an unsupported
response type or a limit (its --storage.remote.read-sample-limit answers 400, and so do our
budgets here); the guard's 429/503 and the deadline's 503 as for any query. A streamed answer
is cut into frames by series; an error after the first frame went out can no longer change the
status, so the connection is dropped and the client sees a truncated stream, never a short
answer that looks complete.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

import numpy as np
from aiohttp import web

from .. import npsort
from ..appkeys import CONFIG, MEMORY, READ_GATE, STORAGE
from ..cluster import head_columns, head_protocol
from ..errors import BadData, GatewayError, LimitExceeded, Unavailable
from ..http.body import read_bounded
from ..limits.context import QueryContext
from ..limits.guard import QueryGuard
from ..model import METRIC_NAME, series_keys
from ..remote import read_codec
from ..remote.read_codec import ReadQuery
from ..storage.batch import SeriesSet
from ..storage.read.recent import RecentView
from .running import guarded
from .sources import read_source

log = logging.getLogger(__name__)

# A streamed query reads its series in batches sized to about this many samples, so the memory
# a read holds stays bounded however many series it selects.
STREAM_BATCH_SAMPLES = 500_000
FIRST_BATCH_SERIES = 64


def read_gate(cfg) -> QueryGuard | None:
    """The remote-read concurrency limit; None when it is off (0). Queue rules as the query guard."""
    if cfg.storage_remote_read_concurrent_limit <= 0:
        return None
    return QueryGuard(cfg.storage_remote_read_concurrent_limit, cfg.query_max_queue, cfg.query_queue_timeout,
                      concurrency_flag="--storage.remote.read-concurrent-limit")


async def handle_read(request: web.Request) -> web.StreamResponse:
    app = request.app
    cfg = app[CONFIG]
    body = await read_bounded(request, read_codec.MAX_REQUEST_BYTES, "remote-read request",
                              "Prometheus's 32 MiB read request limit")
    queries, response_type = read_codec.decode_request(body)
    head_protocol.check_scope(request.rel_url.query)
    if head_protocol.asks_for_head(request.rel_url.query):
        return await _head_read(request, queries, response_type)
    source, warnings = read_source(request, app[STORAGE], request.rel_url.query)
    source = _Complete(source, warnings)
    ctx = QueryContext.for_request(None, cfg.query_timeout, max_samples=cfg.query_max_samples,
                                   max_series=cfg.query_max_series)
    limit = cfg.storage_remote_read_sample_limit
    try:
        async with AsyncExitStack() as stack:
            gate = app[READ_GATE]
            if gate is not None:
                await stack.enter_async_context(gate.slot("remote read"))
            run = await stack.enter_async_context(guarded(request, "remote_read", ctx))
            if response_type == read_codec.SAMPLES:
                results = [await run(lambda q=q: _sampled(source, q, ctx, limit)) for q in queries]
                body = await run(lambda: read_codec.encode_samples_response(results))  # snappy off the loop
                return web.Response(body=body, headers={
                    "Content-Type": read_codec.SAMPLES_CONTENT_TYPE, "Content-Encoding": "snappy"})
            return await _streamed(request, source, {}, run, queries, ctx, cfg.storage_remote_read_max_bytes_in_frame)
    except LimitExceeded as err:  # Prometheus answers a read over its limits with 400
        raise BadData(str(err)) from None


async def _head_read(request: web.Request, queries: list[ReadQuery], response_type) -> web.StreamResponse:
    """?scope=head: this process's uncommitted samples, for a query elsewhere (head_protocol.py). Part of that
    query: its deadline and memory, no query slot, no remote-read limit; over its memory, 422 (the asker's limit)."""
    cfg = request.app[CONFIG]
    head_protocol.refuse_until_ready(request.app[STORAGE])
    view = RecentView(request.app[STORAGE])
    headers = {head_protocol.TABLE_VERSION_HEADER: str(view.table_version)}
    # A metadata call's series read has the metadata deadline, as it would have here.
    metadata = all(q.series_only for q in queries)
    ctx = head_protocol.read_context(request.headers, cfg.query_metadata_timeout if metadata else cfg.query_timeout,
                                     cfg.query_max_memory_per_query, request.app[MEMORY])
    series_limit = _series_limit(request)
    # No query slot: the asking query holds one of its own while it waits, so with slots taken on both sides two
    # gateways would each wait for the other. It is a read of memory, bounded by the deadline and the reservation.
    async with guarded(request, "remote_read", ctx, slot=False) as run:
        if response_type == read_codec.SAMPLES and _columns_asked(request, queries):
            picked = _small_head_reads(view, queries, ctx)
            if picked is not None:  # answered here: a thread hop would cost more than the read
                results = [_columns(view, q, ctx, ids) for q, ids in zip(queries, picked)]
            else:
                results = [await run(lambda q=q: _columns(view, q, ctx)) for q in queries]
            return web.Response(body=head_columns.encode_response(results), headers={
                "Content-Type": head_columns.CONTENT_TYPE, **headers})
        if response_type == read_codec.SAMPLES:
            results = [await run(lambda q=q: _sampled(view, q, ctx, 0, series_limit)) for q in queries]
            body = await run(lambda: read_codec.encode_samples_response(results))  # snappy off the loop
            return web.Response(body=body, headers={
                "Content-Type": read_codec.SAMPLES_CONTENT_TYPE, "Content-Encoding": "snappy", **headers})
        return await _streamed(request, view, headers, run, queries, ctx, cfg.storage_remote_read_max_bytes_in_frame)


class _Complete:
    """A read source that refuses to answer without a peer's recent samples: remote read has no warnings to
    say an answer is partial, so a peer that cannot answer makes the read 503 (the client retries) rather
    than a short answer that looks complete."""

    def __init__(self, source, warnings: list[str]) -> None:
        self.source, self.warnings = source, warnings

    def select_series(self, *args, **kwargs) -> SeriesSet:
        selected = self.source.select_series(*args, **kwargs)
        if self.warnings:
            raise Unavailable(self.warnings[0])
        return selected

    def estimate_samples(self, *args, **kwargs) -> int:
        return self.source.estimate_samples(*args, **kwargs)

    def read_samples(self, *args, **kwargs):
        return self.source.read_samples(*args, **kwargs)

    def read_histograms(self, *args, **kwargs):
        return self.source.read_histograms(*args, **kwargs)


# ---------------------------------------------------------------- selection


def _selects_nothing(q: ReadQuery) -> bool:
    return not q.matchers or q.start_ms > q.end_ms  # Prometheus's TSDB selects nothing without matchers


def _select(storage, q: ReadQuery, ctx: QueryContext) -> SeriesSet:
    """The query's series in label order (the order Prometheus streams them in)."""
    if _selects_nothing(q):
        return SeriesSet(np.empty(0, np.int64), [])
    ss = storage.select_series(list(q.matchers), q.start_ms, q.end_ms, ctx)
    if ss.label_sorted:
        return ss
    order = sorted(range(len(ss)), key=ss.labels.__getitem__)
    return SeriesSet(ss.ids[np.array(order, np.int64)] if order else ss.ids, [ss.labels[i] for i in order])


def _refuse_estimate(storage, ss: SeriesSet, q: ReadQuery, ctx: QueryContext) -> None:
    if len(ss):
        ctx.check_estimate(storage.estimate_samples(ss, q.start_ms, q.end_ms), "remote read")


def _series_limit(request: web.Request) -> int | None:
    """?scope=head&limit=N: at most N series per series-only query, the first in label order (what a peer's
    metadata call keeps of them: --query.max-metadata-series or its request's limit, plus one)."""
    text = request.rel_url.query.get("limit", "")
    if not text:
        return None
    if not text.isdigit():
        raise BadData(f'invalid parameter "limit": {text!r}')
    return int(text) or None


def _sampled(storage, q: ReadQuery, ctx: QueryContext, sample_limit: int, series_limit: int | None = None) -> bytes:
    ss = _select(storage, q, ctx)
    if q.series_only:
        return read_codec.encode_series_only(ss.labels[:series_limit])
    _refuse_estimate(storage, ss, q, ctx)
    block, hists = _read_bounded(storage, ss.ids, q, ctx, sample_limit)
    ctx.check("remote read encoding")
    return read_codec.encode_query_result(ss.labels, block, ss.ids, hists)


def _read_bounded(storage, ids: np.ndarray, q: ReadQuery, ctx: QueryContext, sample_limit: int):
    """(float samples, native histograms) of ``ids`` in the window; a histogram counts as a sample against
    --storage.remote.read-sample-limit, as in Prometheus 3."""
    block = storage.read_samples(ids, q.start_ms, q.end_ms, ctx)
    hists = storage.read_histograms(ids, q.start_ms, q.end_ms, ctx)
    if sample_limit and len(block) + len(hists) > sample_limit:
        raise LimitExceeded(f"exceeded sample limit ({sample_limit}); "
                            "raise --storage.remote.read-sample-limit or narrow the query")
    return block, hists


# ---------------------------------------------------------------- ?scope=head&format=columns


def _columns_asked(request: web.Request, queries: list[ReadQuery]) -> bool:
    """A reader that shares the table asks for arrays (cluster/head_columns.py); label sets only is remote read's."""
    return request.rel_url.query.get("format", "") == head_columns.FORMAT and not any(q.series_only for q in queries)


# A head read of one metric of at most INLINE_HEAD_SERIES series, estimated at no more than INLINE_HEAD_SAMPLES
# samples, is answered on the event loop: it takes well under a millisecond, less than handing it to a query
# thread and back (two thread wake-ups). Only when the head needs no sort first (RecentView.quick_for): the
# event loop takes the writes, and a sort of what arrived since the last read can take a second at 7,500 nodes.
INLINE_HEAD_SAMPLES = 20_000
INLINE_HEAD_SERIES = 5_000


def _small_head_reads(view: RecentView, queries: list[ReadQuery], ctx: QueryContext) -> list[np.ndarray] | None:
    """Each query's ids when every query names a small metric, the head needs no sort, and together they would
    read few samples; None otherwise (read them in a query thread)."""
    names = [_metric_named(q) for q in queries if not _selects_nothing(q)]
    if not all(name is not None and view.quick_for(name, INLINE_HEAD_SERIES) for name in names):
        return None
    picked = [_head_ids(view, q, ctx) for q in queries]
    small = sum(view.estimate_samples(SeriesSet(ids, []), q.start_ms, q.end_ms)
                for q, ids in zip(queries, picked) if len(ids)) <= INLINE_HEAD_SAMPLES
    return picked if small else None


def _metric_named(q: ReadQuery) -> str | None:
    return next((m.value for m in q.matchers if m.name == METRIC_NAME and m.op == "="), None)


def _head_ids(view: RecentView, q: ReadQuery, ctx: QueryContext) -> np.ndarray:
    return np.empty(0, np.int64) if _selects_nothing(q) else view.select_ids(list(q.matchers), q.start_ms, q.end_ms, ctx)


def _columns(view: RecentView, q: ReadQuery, ctx: QueryContext, ids: np.ndarray | None = None) -> bytes:
    """One query's recent samples as arrays, in id order (no label sets to build or sort, but those of the series
    the table does not hold at the view's version). ``ids``: the query's, when already selected."""
    if ids is None:
        ids = _head_ids(view, q, ctx)
    ss = SeriesSet(ids, [])
    _refuse_estimate(view, ss, q, ctx)
    block, hists = _read_bounded(view, ids, q, ctx, 0)
    ctx.check("remote read encoding")
    labelled = np.flatnonzero(npsort.members(ids, view.uncommitted))
    labels = view.labels_of_ids(ids[labelled])
    if any(lb is None for lb in labels):  # a series the view selected is gone from the series table
        raise Unavailable("a series left the series table during the read; retry")
    return head_columns.encode_result(ids, labelled, series_keys(labels), block, hists)


# ---------------------------------------------------------------- streaming


class _Stream:
    """The streamed response, started (headers sent, 200) only when the first frame is ready."""

    def __init__(self, request: web.Request, headers: dict[str, str]) -> None:
        self.request = request
        self.headers = headers
        self.resp: web.StreamResponse | None = None

    async def write(self, frames: list[bytes]) -> None:
        if not frames:
            return
        await self.start()
        await self.resp.write(b"".join(frames))

    async def start(self) -> web.StreamResponse:
        if self.resp is None:
            self.resp = web.StreamResponse(headers={"Content-Type": read_codec.STREAMED_CONTENT_TYPE,
                                                    **self.headers})
            await self.resp.prepare(self.request)
        return self.resp


async def _streamed(request: web.Request, storage, headers: dict[str, str], run, queries: list[ReadQuery],
                    ctx: QueryContext, max_bytes_in_frame: int) -> web.StreamResponse:
    stream = _Stream(request, headers)
    try:
        for index, q in enumerate(queries):
            ss = await run(lambda q=q: _select(storage, q, ctx))
            await run(lambda q=q, ss=ss: _refuse_estimate(storage, ss, q, ctx))
            start, size = 0, FIRST_BATCH_SERIES
            while start < len(ss):
                batch = SeriesSet(ss.ids[start:start + size], ss.labels[start:start + size])
                frames, samples = await run(
                    lambda b=batch, i=index, q=q: _batch_frames(storage, b, i, q, ctx, max_bytes_in_frame))
                await stream.write(frames)
                start += len(batch)
                size = max(1, min(4 * size, int(size * STREAM_BATCH_SAMPLES / max(samples, 1))))
    except GatewayError:
        if stream.resp is None:
            raise  # nothing sent yet: an ordinary error response
        log.warning("remote read failed after streaming began; dropping the connection", exc_info=True)
        if request.transport is not None:
            request.transport.abort()
        return stream.resp
    return await stream.start()


def _batch_frames(storage, batch: SeriesSet, index: int, q: ReadQuery, ctx: QueryContext,
                  max_bytes_in_frame: int) -> tuple[list[bytes], int]:
    block, hists = _read_bounded(storage, batch.ids, q, ctx, 0)
    ctx.check("remote read encoding")
    chunks = read_codec.series_chunks(block, hists)
    frames: list[bytes] = []
    for sid, labels in zip(batch.ids.tolist(), batch.labels):
        if sid in chunks:  # a series without samples in the window is left out, as Prometheus does
            frames.extend(read_codec.series_frames(index, labels, chunks[sid], max_bytes_in_frame))
    return frames, len(block) + len(hists)
