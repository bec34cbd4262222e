"""run_guarded with a real aiohttp server: a client that hangs up cancels the query's context, and
the query keeps its slot until its worker thread has actually stopped (so --query.max-concurrency
bounds the work running, not just the requests being answered)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from metricsgw import appkeys as K
from metricsgw.api.running import run_guarded
from metricsgw.errors import QueryCanceled
from metricsgw.limits.context import QueryContext
from metricsgw.limits.guard import QueryGuard
from metricsgw.telemetry import Telemetry

WORK_STEP_S = 0.4  # the worker notices cancellation only at its next ctx.check, as numpy stages do


def test_hang_up_cancels_and_the_slot_is_held_until_the_worker_stops():
    async def main():
        tel = Telemetry()
        guard = QueryGuard(1, 1, 5.0, tel)
        events: dict[str, float] = {}
        worker_done = threading.Event()

        def work(ctx: QueryContext):
            try:
                for _ in range(50):  # 20 s if nobody stops it
                    time.sleep(WORK_STEP_S)
                    ctx.check("work")
            except QueryCanceled:
                events["worker_stopped"] = time.monotonic()
                raise
            finally:
                worker_done.set()

        async def handler(request):
            ctx = QueryContext(timeout_s=30)
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
            await asyncio.sleep(0.1)
            assert guard.running == 1
            writer.close()  # the client leaves
            gone = time.monotonic()
            # the slot stays taken while the worker is still inside its step
            await asyncio.sleep(WORK_STEP_S / 4)
            assert guard.running == 1 and not worker_done.is_set()
            for _ in range(100):
                if guard.running == 0:
                    break
                await asyncio.sleep(0.01)
            released = time.monotonic()
            assert guard.running == 0 and worker_done.is_set()
            assert events["worker_stopped"] <= released  # released only after the worker stopped
            assert events["worker_stopped"] - gone < 2 * WORK_STEP_S  # stopped at its next check
            assert tel.guard_rejections.labels("client_disconnect")._value.get() == 1
        finally:
            await runner.cleanup()
            app[K.QUERY_POOL].shutdown(wait=True)

    asyncio.run(main())
