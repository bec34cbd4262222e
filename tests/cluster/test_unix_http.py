"""The blocking client a query worker reads its own shards with (cluster/unix_http.py), against a real aiohttp
server on a Unix socket: answers with a length, chunked or up to the close; a kept-alive connection reused, and
sent again once when the server closed it while idle; a deadline, a bound on the body and a caller's check stop
a read, and the connection is not reused after that."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time

import pytest
from aiohttp import web

from metricsgw.cluster import unix_http


class Server:
    """aiohttp on a Unix socket, its loop in a thread; counts connections (a keep-alive reuse opens none)."""

    def __init__(self, keepalive_timeout: float = 75.0) -> None:
        self.dir = tempfile.mkdtemp(prefix="mgw-", dir="/tmp")  # a socket path stays under ~100 bytes
        self.path = os.path.join(self.dir, "s.sock")
        self._transports: list = []  # every connection a request came on (kept: ids are not reused then)
        self.release = threading.Event()
        self.keepalive_timeout = keepalive_timeout

    @property
    def connections(self) -> int:
        return len(self._transports)

    async def echo(self, request: web.Request) -> web.StreamResponse:
        if not any(t is request.transport for t in self._transports):
            self._transports.append(request.transport)
        body = await request.read()
        how = request.query.get("how", "length")
        if how == "length":
            return web.Response(body=body[::-1], headers={"X-Got": request.headers.get("X-Token", "")})
        if how == "refuse":
            return web.Response(status=503, text="busy")
        if how == "empty":
            return web.Response(status=204)
        if how == "slow":
            while not self.release.is_set():
                await asyncio.sleep(0.01)
            return web.Response(body=b"late")
        resp = web.StreamResponse()
        if how == "chunked":
            resp.enable_chunked_encoding()
        else:  # "close": no length, no chunks: the body runs to the close
            resp.force_close()
        await resp.prepare(request)
        for i in range(3):
            await resp.write(body + bytes([i]))
        await resp.write_eof()
        return resp

    def __enter__(self) -> "Server":
        started = threading.Event()

        def run() -> None:
            self.loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/echo", self.echo)
            self.runner = web.AppRunner(app, keepalive_timeout=self.keepalive_timeout)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.UnixSite(self.runner, self.path).start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _ok() -> None:
    pass


@pytest.mark.parametrize("how", ["length", "chunked", "close"])
def test_each_way_an_answer_can_end_is_read_whole(how):
    with Server() as srv:
        client = unix_http.UnixHttpClient(srv.path)
        got = client.post(f"/echo?how={how}", b"abc", {"X-Token": "t"}, 5.0, 1 << 20, _ok)
        assert got.status == 200
        assert got.body == (b"cba" if how == "length" else b"abc\x00abc\x01abc\x02")
        if how == "length":
            assert got.headers["x-got"] == "t"


def test_a_kept_alive_connection_is_reused_and_one_closed_by_the_server_is_replaced():
    with Server(keepalive_timeout=0.2) as srv:
        client = unix_http.UnixHttpClient(srv.path)
        for _ in range(3):
            assert client.post("/echo", b"x", {}, 5.0, 100, _ok).body == b"x"
        assert srv.connections == 1
        time.sleep(0.6)  # the server closes the idle connection
        assert client.post("/echo", b"y", {}, 5.0, 100, _ok).body == b"y"  # sent again on a new one
        assert srv.connections == 2
        # an answer up to the close (on the second connection) leaves it closed: the next call opens a third
        client.post("/echo?how=close", b"z", {}, 5.0, 100, _ok)
        client.post("/echo", b"z", {}, 5.0, 100, _ok)
        assert srv.connections == 3


def test_a_refusal_is_an_answer_with_its_status():
    with Server() as srv:
        got = unix_http.UnixHttpClient(srv.path).post("/echo?how=refuse", b"", {}, 5.0, 100, _ok)
        assert got.status == 503 and got.body == b"busy"


def test_a_204_has_no_body_even_without_a_length_and_the_connection_is_kept():
    with Server() as srv:
        client = unix_http.UnixHttpClient(srv.path)
        got = client.post("/echo?how=empty", b"x", {}, 5.0, 100, _ok)  # would wait for the close otherwise
        assert got.status == 204 and got.body == b""
        assert client.post("/echo", b"ab", {}, 5.0, 100, _ok).body == b"ba"
        assert srv.connections == 1


def test_the_deadline_the_body_bound_and_the_callers_check_stop_a_read():
    with Server() as srv:
        client = unix_http.UnixHttpClient(srv.path)
        t0 = time.monotonic()
        with pytest.raises(unix_http.Timeout):
            client.post("/echo?how=slow", b"", {}, 0.3, 100, _ok)
        assert time.monotonic() - t0 < 30  # bounded by the deadline (generously: a busy machine is slow)
        with pytest.raises(unix_http.TooBig):
            client.post("/echo", b"x" * 101, {}, 5.0, 100, _ok)
        with pytest.raises(unix_http.TooBig):
            client.post("/echo?how=chunked", b"x" * 40, {}, 5.0, 100, _ok)

        class Stop(Exception):
            pass

        def check():
            raise Stop()

        with pytest.raises(Stop):  # called while the answer is awaited
            client.post("/echo?how=slow", b"", {}, 30.0, 100, check)
        srv.release.set()
        before = srv.connections
        assert client.post("/echo", b"ok", {}, 5.0, 100, _ok).body == b"ko"  # a fresh connection: no stale answer
        assert srv.connections == before + 1


def test_no_server_is_an_os_error():
    with pytest.raises(OSError):
        unix_http.UnixHttpClient("/nonexistent/mgw.sock").post("/echo", b"", {}, 1.0, 100, _ok)
