"""Remote read under the query guard, on the real app and storage: deadline, disconnect, slots,
and an error after streaming began. A test hook (``HeldStorage``) holds ``read_samples`` until the
test lets it go, checking the query context as the real reads do, so what the guard does is decided
by construction, never by how fast the machine is."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiohttp import ClientPayloadError
from aiohttp.test_utils import TestClient, TestServer

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.errors import LimitExceeded
from metricsgw.remote import codec
from metricsgw.remote.proto import remote_read_pb2 as pb
from tests.remote.read_client import HEADERS, build_request, decode_samples

# Fixed 2023 timestamps: the apps keep a century of retention so the ingest time window accepts them.
T0 = 1_700_000_000_000
SAMPLES, STREAMED = pb.ReadRequest.SAMPLES, pb.ReadRequest.STREAMED_XOR_CHUNKS


class HeldStorage:
    """The real storage, except that read_samples waits at its start until ``release`` is set,
    calling ctx.check every 10 ms as storage reads do (so a deadline or a cancel stops it);
    ``fail_on_call`` makes that call raise a limit error instead."""

    def __init__(self, real) -> None:
        self.real = real
        self.release = threading.Event()
        self.entered = threading.Event()
        self.stopped = threading.Event()
        self.calls = 0
        self.fail_on_call: int | None = None

    def __getattr__(self, name):
        return getattr(self.real, name)

    def read_samples(self, ids, start_ms, end_ms, ctx):
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise LimitExceeded("query processing would load too many samples (test hook; --query.max-samples)")
        self.entered.set()
        try:
            while not self.release.wait(0.01):
                ctx.check("held read")
        finally:
            self.stopped.set()
        return self.real.read_samples(ids, start_ms, end_ms, ctx)


def make_app(tmp_path, **settings):
    app = build_app(load({"storage.path": str(tmp_path), "storage.retention.time": "100y", **settings}))
    held = HeldStorage(app[appkeys.STORAGE])
    app[appkeys.STORAGE] = held
    return app, held


async def _started(app) -> TestClient:
    client = TestClient(TestServer(app))
    await client.start_server()
    while not app[appkeys.STORAGE].ready:
        await asyncio.sleep(0.01)
    series = [([("__name__", "rg"), ("i", f"{i:03d}")], [(T0 + k * 15_000, float(k)) for k in range(10)])
              for i in range(200)]
    resp = await client.post("/api/v1/write", data=codec.encode_v1(series),
                             headers={"Content-Type": "application/x-protobuf"})
    assert resp.status == 204
    return client


def read_body(rtype=SAMPLES) -> bytes:
    return build_request([{"matchers": [("__name__", "=", "rg")], "start": T0, "end": T0 + 10**7}], [rtype])


def rejections(app, limit: str) -> float:
    return app[appkeys.TELEMETRY].registry.get_sample_value("metricsgw_guard_rejections_total",
                                                             {"limit": limit}) or 0.0


@pytest.mark.parametrize("rtype", [SAMPLES, STREAMED], ids=["samples", "streamed"])
def test_deadline_answers_503_timeout(tmp_path, rtype):
    app, held = make_app(tmp_path, **{"query.timeout": "1s"})

    async def main():
        async with await _started(app) as client:
            resp = await client.post("/api/v1/read", data=read_body(rtype), headers=HEADERS)
            return resp.status, await resp.text()

    status, text = asyncio.run(main())  # the hook never releases: only the deadline ends the read
    assert status == 503 and "timed out" in text and "--query.timeout" in text
    assert rejections(app, "query.timeout") == 1
    assert app[appkeys.GUARD].running == 0


@pytest.mark.parametrize("rtype", [SAMPLES, STREAMED], ids=["samples", "streamed"])
def test_disconnect_stops_the_read_and_keeps_the_slot_until_it_stopped(tmp_path, rtype):
    app, held = make_app(tmp_path)

    async def main():
        async with await _started(app) as client:
            port = client.server.port
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            body = read_body(rtype)
            head = (f"POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                    f"Content-Encoding: snappy\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            writer.write(head + body)
            await writer.drain()
            assert await asyncio.to_thread(held.entered.wait, 10)
            guard = app[appkeys.GUARD]
            assert guard.running == 1
            writer.close()  # hang up while the read is held
            for _ in range(500):
                if held.stopped.is_set() and guard.running == 0:
                    break
                await asyncio.sleep(0.01)
            return guard.running, held.stopped.is_set()

    running, stopped = asyncio.run(main())
    assert stopped, "the held read did not notice the client left"
    assert running == 0
    assert rejections(app, "client_disconnect") == 1


def test_read_concurrent_limit_and_query_slots(tmp_path):
    # one remote read at a time, no queue; PromQL still has its own slots
    app, held = make_app(tmp_path, **{"storage.remote.read-concurrent-limit": "1", "query.max-queue": "0",
                                      "query.max-concurrency": "2"})

    async def main():
        async with await _started(app) as client:
            first = asyncio.ensure_future(client.post("/api/v1/read", data=read_body(), headers=HEADERS))
            assert await asyncio.to_thread(held.entered.wait, 10)
            second = await client.post("/api/v1/read", data=read_body(), headers=HEADERS)
            promql = await client.get("/api/v1/query", params={"query": "count(rg)", "time": str(T0 / 1000 + 60)})
            held.release.set()
            first_resp = await first
            return (second.status, second.headers.get("Retry-After"), await second.text(), promql.status,
                    await promql.json(), first_resp.status, await first_resp.read())

    s2, retry, text2, sp, promql, s1, body1 = asyncio.run(main())
    assert s2 == 429 and retry and "too many queries" in text2 and "--storage.remote.read-concurrent-limit=1" in text2
    assert sp == 200 and promql["data"]["result"][0]["value"][1] == "200"
    assert s1 == 200 and len(decode_samples(body1)[0]) == 200


def test_error_after_streaming_began_drops_the_connection(tmp_path):
    app, held = make_app(tmp_path)
    held.release.set()
    held.fail_on_call = 2  # the first batch streams, the second fails

    async def main():
        async with await _started(app) as client:
            resp = await client.post("/api/v1/read", data=read_body(STREAMED), headers=HEADERS)
            status = resp.status
            with pytest.raises(ClientPayloadError):  # a truncated stream, not a complete-looking answer
                await resp.read()
            return status

    assert asyncio.run(main()) == 200  # the status went out with the first frame
    assert held.calls == 2
    assert app[appkeys.GUARD].running == 0
