"""run_guarded with a real aiohttp server: a client that hangs up cancels the query's context, and
the query keeps its slot until its worker thread has actually stopped (so --query.max-concurrency
bounds the work running, not just the requests being answered)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from metricsgw import appkeys as K
from metricsgw.api.running import run_guarded
from metricsgw.errors import QueryCanceled
from metricsgw.limits.context import QueryContext
from metricsgw.limits.guard import QueryGuard
from metricsgw.telemetry import Telemetry



async def _until(pred, what: str, timeout_s: float = 30.0) -> None:
    """Liveness bound only: a working guard gets there at any machine speed."""
    for _ in range(int(timeout_s / 0.01)):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {timeout_s:g}s: {what}")


def test_hang_up_cancels_and_the_slot_is_held_until_the_worker_stops():
    async def main():
        tel = Telemetry()
        guard = QueryGuard(1, 1, 5.0, tel)
        order: list[str] = []
        in_step = threading.Event()  # the worker is inside a step that cannot be interrupted
        end_step = threading.Event()  # the test lets that step finish
        worker_done = threading.Event()
        contexts: list[QueryContext] = []

        def work(ctx: QueryContext):
            try:
                for _ in range(50):
                    in_step.set()
                    assert end_step.wait(60), "the test never ended the step"
                    ctx.check("work")  # as numpy stages do: cancellation is seen here, not inside the step
            except QueryCanceled:
                order.append("worker stopped")
                raise
            finally:
                worker_done.set()

        async def handler(request):
            ctx = QueryContext(timeout_s=120)
            contexts.append(ctx)
            await run_guarded(request, "query", ctx, lambda: work(ctx))
            return web.json_response({})

        app = web.Application()
        app[K.GUARD], app[K.TELEMETRY] = guard, tel
        app[K.QUERY_POOL] = ThreadPoolExecutor(3)
        app.router.add_get("/q", handler)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /q HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            await _until(in_step.is_set, "the worker started")
            assert guard.running == 1
            writer.close()  # the client leaves
            await _until(lambda: contexts[0].cancelled, "the query's context is cancelled")
            assert tel.guard_rejections.labels("client_disconnect")._value.get() == 1
            # the worker is still inside its step: the slot stays taken
            await asyncio.sleep(0.05)
            assert guard.running == 1 and not worker_done.is_set()
            end_step.set()  # the step ends; the worker checks its context and stops there
            await _until(lambda: guard.running == 0, "the slot is released")
            order.append("slot released")
            assert worker_done.is_set()
            assert order == ["worker stopped", "slot released"]
        finally:
            await runner.cleanup()
            app[K.QUERY_POOL].shutdown(wait=True)

    asyncio.run(main())
