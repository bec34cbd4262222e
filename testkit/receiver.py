"""A fake remote-write receiver on a free loopback port: the senders' retries are tested against the statuses
it is told to answer, with no server of ours in the way."""

from __future__ import annotations

from aiohttp import web


async def start_receiver(statuses: list[int]):
    """Answers the given statuses in turn (then 204), recording the bodies: (runner, write URL, bodies);
    ``runner.cleanup()`` stops it."""
    got: list[bytes] = []

    async def write(request: web.Request) -> web.Response:
        got.append(await request.read())
        status = statuses.pop(0) if statuses else 204
        return web.Response(status=status, text="" if status == 204 else "nope")

    app = web.Application()
    app.router.add_post("/api/v1/write", write)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}/api/v1/write", got
