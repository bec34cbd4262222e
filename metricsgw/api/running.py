"""Run blocking query work off the event loop, inside the guard, stoppable.

A query runs in the query thread pool (never the one ingestion uses). Its ``QueryContext`` is
interrupted when the deadline passes (a timer) or when aiohttp cancels the handler because the
client hung up, which stops DuckDB at once and numpy work at the next stage check.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, TypeVar

from aiohttp import web

from .. import malloc
from ..appkeys import GUARD, QUERY_POOL, TELEMETRY
from ..errors import LimitExceeded, QueryTimeout
from ..limits.context import QueryContext
from ..querylog.record import limit_flag

T = TypeVar("T")
Runner = Callable[[Callable[[], T]], Awaitable[T]]


async def run_guarded(request: web.Request, kind: str, ctx: QueryContext, fn: Callable[[], T]) -> T:
    async with guarded(request, kind, ctx) as run:
        return await run(fn)


@asynccontextmanager
async def guarded(request: web.Request, kind: str, ctx: QueryContext, slot: bool = True) -> AsyncIterator[Runner]:
    """One guard slot and one deadline for a query that runs several steps in the query pool
    (a streamed remote read): ``await run(fn)`` runs each step there, stoppable like run_guarded.
    ``slot=False``: the deadline, budgets and cancellation without a query slot (a peer's read of
    our head, which the peer's own query waits for: see remote_read.py). Such a read is part of the
    asking query, which counts its rejection (a timeout or limit) itself: it is not counted here as well,
    so a gateway's ``metricsgw_guard_rejections_total`` counts each refused query once."""
    guard = request.app[GUARD]
    tel = request.app[TELEMETRY]
    pool = request.app[QUERY_POOL]
    async with (guard.slot(kind, ctx) if slot else contextlib.nullcontext()):
        ctx.admitted = time.monotonic()  # the query log tells the wait for a slot from the evaluation
        loop = asyncio.get_running_loop()
        timer = loop.call_later(max(ctx.remaining(), 0.0), ctx.interrupt)

        async def run(fn: Callable[[], T]) -> T:
            fut = loop.run_in_executor(pool, fn)
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                ctx.cancel()  # the client went away: stop DuckDB and the evaluator
                tel.guard_rejections.labels("client_disconnect").inc()
                await _until_stopped(fut)  # keep the slot while the worker still runs: concurrency stays true
                raise

        try:
            yield run
        except QueryTimeout:
            if slot:
                tel.guard_rejections.labels(ctx.timeout_setting.lstrip("-")).inc()
            raise
        except LimitExceeded as err:
            if slot:
                tel.guard_rejections.labels(limit_flag(err).lstrip("-") or "other").inc()
            raise
        finally:
            timer.cancel()
            ctx.release_all()  # its memory goes back to the pool before the slot is handed on
            try:
                pool.submit(malloc.trim_after, ctx.peak_bytes)  # and, after a big query, to the OS
            except RuntimeError:  # the pool is shut down: the server is stopping
                pass


async def _until_stopped(fut: asyncio.Future) -> None:
    """Wait for a cancelled query's worker thread to reach its next ctx.check and finish.

    Releasing the slot at once would let clients that hang up and retry run more queries than
    --query.max-concurrency allows. A second cancellation (server shutdown) stops the wait."""
    try:
        await asyncio.shield(fut)
    except BaseException:  # its QueryCanceled, or anything else: the worker is done either way
        pass

