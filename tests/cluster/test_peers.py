"""A gateway with --cluster.peers, served in-process, against real peer gateways and against peers that
misbehave in ways a real one cannot be made to on demand (a body of garbage, an answer that never comes).

By default every failing peer fails the call with 503 ``unavailable`` naming it (an answer without a peer's
recent samples would look complete); with partial answers allowed (--query.partial-response or the request's
partial_response) it gives a 200 with a warning naming it, for query, query_range, series, labels and label
values. Each call is counted by result in /metrics and logged once per change of state. The query's own limits
still hold: a peer's samples count against --query.max-samples, the query's deadline bounds the wait,
and a client that leaves stops the calls to the peers."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time

import aiohttp
import pytest
from aiohttp import web

from metricsgw import appkeys
from metricsgw.app import build_app
from metricsgw.config import load
from metricsgw.remote import read_codec
from tests.web.certs import bcrypt_hash
from tests.web.harness import WRITE_HEADERS, basic, fetch, serving, write_body

T_S = time.time() - 60
T_MS = int(T_S * 1000)
PM = '{__name__=~"pm_.*"}'
SUM = f"sum({PM})"


class FakePeer:
    """An HTTP server at /api/v1/read that answers ``how``: garbage, 503, no series, or never (until cancelled)."""

    def __init__(self, how: str, unix: bool = False) -> None:
        self.how = how
        # a unix: peer is read by the query's worker thread itself (cluster/unix_http.py), not on the loop
        self.sock_dir = tempfile.mkdtemp(prefix="mgw-", dir="/tmp") if unix else None
        self.cancelled = asyncio.Event()
        self.requests = 0
        app = web.Application()
        app.router.add_post("/api/v1/read", self.handle)
        # label names and values are asked on the JSON APIs (?scope=head): the same misbehaviour there
        app.router.add_get("/api/v1/labels", self.handle_json)
        app.router.add_get("/api/v1/label/{name}/values", self.handle_json)
        self.runner = web.AppRunner(app, handler_cancellation=True)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        await request.read()
        if self.how == "garbage":
            return web.Response(body=b"\xff\x00 this is not snappy", content_type="application/x-protobuf")
        if self.how == "refuse":
            return web.Response(status=503, text="overloaded")
        if self.how == "empty":  # a valid answer: no series
            return web.Response(body=read_codec.encode_samples_response([b""]), content_type="application/x-protobuf")
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def handle_json(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.how == "garbage":
            return web.Response(body=b"\xff\x00 this is not JSON", content_type="application/json")
        if self.how == "empty":
            return web.json_response({"status": "success", "data": []})
        return await self.handle(request)

    async def __aenter__(self) -> str:
        await self.runner.setup()
        if self.sock_dir:
            path = os.path.join(self.sock_dir, "peer.sock")
            await web.UnixSite(self.runner, path).start()
            return f"unix:{path}"
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()
        if self.sock_dir:
            shutil.rmtree(self.sock_dir, ignore_errors=True)


def _closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed


async def _write(session, url: str, name: str, value: float, headers=None) -> None:
    status, text, _ = await fetch(session, "POST", url + "/api/v1/write", data=write_body(name, value, T_MS),
                                  headers={**WRITE_HEADERS, **(headers or {})})
    assert status == 204, text


async def _get(session, url: str, path: str, **params) -> tuple[int, dict]:
    async with session.get(url + path, params=params) as r:
        return r.status, await r.json()


def _metric(text: str, peer: str, result: str) -> float:
    line = f'metricsgw_peer_requests_total{{peer="{peer}",result="{result}"}} '
    return sum(float(x[len(line):]) for x in text.splitlines() if x.startswith(line))


PARTIAL = {"query.partial-response": "true"}
CALLS = [("/api/v1/query", {"query": SUM, "time": str(T_S)}),
         ("/api/v1/query_range", {"query": SUM, "start": str(T_S - 60), "end": str(T_S), "step": "15"}),
         ("/api/v1/series", {"match[]": PM}), ("/api/v1/labels", {}), ("/api/v1/label/__name__/values", {})]


@pytest.mark.parametrize("how", ["garbage", "refuse", "hang", "down"])
def test_a_failing_peer_fails_the_call_unless_partial_answers_are_asked_for(tmp_path, how):
    async def main():
        async with FakePeer(how) as failing:
            peer = _closed_port_url() if how == "down" else failing
            for flag, asked, partial in ((None, None, False), (None, "true", True), ("true", None, True),
                                         ("true", "false", False)):
                settings = {"cluster.peers": [peer], "cluster.peer-timeout": "1s"}
                if flag:
                    settings["query.partial-response"] = flag
                async with serving(tmp_path / f"gw-{flag}-{asked}", settings=settings) as gw, \
                        aiohttp.ClientSession() as s:
                    await _write(s, gw.url, "pm_local", 1.0)
                    for path, params in CALLS:
                        status, body = await _get(s, gw.url, path, **params,
                                                  **({"partial_response": asked} if asked else {}))
                        if partial:
                            assert status == 200 and f"peer {peer} did not answer" in body["warnings"][0], body
                        else:
                            assert (status, body["errorType"]) == (503, "unavailable"), (path, body)
                            assert body["error"].startswith(f"peer {peer} could not be read: "), body
                            assert "partial_response=true" in body["error"]

    asyncio.run(main())


def test_a_bad_partial_response_parameter_is_refused(tmp_path):
    async def main():
        async with serving(tmp_path / "gw") as gw, aiohttp.ClientSession() as s:
            status, body = await _get(s, gw.url, "/api/v1/query", query="up", partial_response="maybe")
            assert (status, body["errorType"]) == (400, "bad_data") and '"partial_response"' in body["error"]

    asyncio.run(main())


def test_every_kind_of_failing_peer_gives_a_warning_naming_it_in_a_partial_answer(tmp_path, caplog):
    async def main():
        auth = f"basic_auth_users:\n  reader: {bcrypt_hash('pw')}\n"
        (tmp_path / "ok").mkdir()
        async with serving(tmp_path / "ok", web_config=auth) as ok, FakePeer("garbage") as garbage, \
                FakePeer("refuse") as refusing, FakePeer("hang") as hanging:
            down = _closed_port_url()
            ok_with_login = ok.url.replace("http://", "http://reader:pw@")
            unauthorised = ok.url.replace("127.0.0.1", "localhost")  # the same gateway, no credentials: 401
            settings = {"cluster.peers": [ok_with_login, garbage, refusing, hanging, down, unauthorised],
                        "cluster.peer-timeout": "1s", **PARTIAL}
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                await _write(s, gw.url, "pm_local", 1.0)
                await _write(s, ok.url, "pm_peer", 2.0, basic("reader", "pw"))
                bad = {garbage: "garbage", refusing: "refused", hanging: "timeout", down: "down",
                       unauthorised: "refused"}
                calls = CALLS
                for path, params in calls * 2:  # twice: one log line per peer all the same
                    status, body = await _get(s, gw.url, path, **params)
                    assert status == 200, (path, body)
                    warnings = body["warnings"]
                    assert len(warnings) == len(bad), warnings
                    for url, kind in bad.items():
                        assert any(url + " " in w and f"({kind}:" in w for w in warnings), (url, kind, warnings)
                    assert not any(ok.url + " " in w for w in warnings)
                    assert "reader:pw" not in str(body)
                # the one peer that answers is in every answer: its sample, its series and label values
                _, q = await _get(s, gw.url, "/api/v1/query", query=SUM, time=str(T_S))
                assert q["data"]["result"][0]["value"][1] == "3"
                _, series = await _get(s, gw.url, "/api/v1/series", **{"match[]": PM})
                assert sorted(x["__name__"] for x in series["data"]) == ["pm_local", "pm_peer"]
                _, names = await _get(s, gw.url, "/api/v1/label/__name__/values")
                assert names["data"] == ["pm_local", "pm_peer"]
                async with s.get(gw.url + "/metrics") as r:
                    metrics = await r.text()
                for url, kind in bad.items():
                    assert _metric(metrics, url, kind) == 2 * len(calls) + 3  # each call above asked each peer once
                assert _metric(metrics, ok.url, "ok") == 2 * len(calls) + 3
                assert "reader:pw" not in metrics

    with caplog.at_level(logging.WARNING, logger="metricsgw.cluster.peers"):
        asyncio.run(main())
    changes = [r.getMessage() for r in caplog.records if r.name == "metricsgw.cluster.peers"]
    assert len(changes) == 5, changes  # each failing peer once, however many calls failed


def test_a_peer_coming_back_is_logged_once_and_answers_are_complete_again(tmp_path, caplog):
    async def main():
        peer = FakePeer("refuse")
        async with peer as url, serving(tmp_path / "gw", settings={"cluster.peers": [url], **PARTIAL}) as gw, \
                aiohttp.ClientSession() as s:
            for how, warned in (("refuse", True), ("refuse", True), ("empty", False), ("empty", False),
                                ("refuse", True)):
                peer.how = how
                status, body = await _get(s, gw.url, "/api/v1/query", query="up")
                assert status == 200 and ("warnings" in body) == warned, (how, body)

    with caplog.at_level(logging.INFO, logger="metricsgw.cluster.peers"):
        asyncio.run(main())
    changes = [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records if r.name == "metricsgw.cluster.peers"]
    assert [level for level, _ in changes] == ["WARNING", "INFO", "WARNING"], changes


def test_peer_samples_count_against_the_query_budget(tmp_path):
    async def main():
        async with serving(tmp_path / "peer") as peer:
            settings = {"cluster.peers": [peer.url], "query.max-samples": "3"}
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                await _write(s, gw.url, "pm", 1.0)
                status, body = await _get(s, gw.url, "/api/v1/query", query="pm[5m]", time=str(T_S + 1))
                assert status == 200 and len(body["data"]["result"]) == 1  # within budget
                for i in range(4):  # four more samples, of series the peer holds alone
                    await _write(s, peer.url, f"pm_{i}", 2.0)
                status, body = await _get(s, gw.url, "/api/v1/query", query='{__name__=~"pm.*"}[5m]',
                                          time=str(T_S + 1))
                assert status == 422 and "--query.max-samples" in body["error"], body

    asyncio.run(main())


@pytest.mark.parametrize("path, params", [("/api/v1/query", {"query": "up", "timeout": "2s"}),
                                          ("/api/v1/series", {"match[]": "up"}), ("/api/v1/labels", {})],
                         ids=["query-2s", "series", "labels"])
def test_a_peer_slower_than_the_deadline_leaves_a_warning_not_a_timeout(tmp_path, path, params):
    """With partial answers, the query's deadline bounds the wait (here shorter than --cluster.peer-timeout); the
    answer comes without the peer, in time. The metadata calls run with the defaults: their deadline
    (--query.metadata-timeout) is as long as --cluster.peer-timeout."""
    async def main():
        async with FakePeer("hang") as hanging:
            settings = {"cluster.peers": [hanging], **PARTIAL} | (
                {"cluster.peer-timeout": "10m"} if "timeout" in params else {})
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                status, body = await _get(s, gw.url, path, **params)
                assert status == 200, body
                assert len(body["warnings"]) == 1 and f"peer {hanging} did not answer (timeout:" in body["warnings"][0]

    asyncio.run(main())


def test_a_peer_slower_than_the_query_is_the_query_timing_out(tmp_path):
    """Without partial answers a peer may take all of the query's time; when that runs out, the answer is the
    query's own timeout, naming the query's setting (not the peer's)."""
    async def main():
        async with FakePeer("hang") as hanging:
            settings = {"cluster.peers": [hanging], "cluster.peer-timeout": "10m"}
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                status, body = await _get(s, gw.url, "/api/v1/query", query="up", timeout="1s")
                assert (status, body["errorType"]) == (503, "timeout"), body
                assert "--query.timeout" in body["error"] and "--cluster.peer-timeout" not in body["error"], body

    asyncio.run(main())


def test_a_client_that_leaves_stops_the_calls_to_its_peers(tmp_path):
    async def main():
        peer = FakePeer("hang")
        async with peer as hanging:
            settings = {"cluster.peers": [hanging], "cluster.peer-timeout": "10m"}
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                request = asyncio.ensure_future(_get(s, gw.url, "/api/v1/query", query="up"))
                while peer.requests == 0:  # the gateway is waiting for the peer now
                    await asyncio.sleep(0.01)
                request.cancel()  # the client hangs up
                with pytest.raises(asyncio.CancelledError):
                    await request
                await asyncio.wait_for(peer.cancelled.wait(), 60)  # the gateway dropped its call to the peer

    asyncio.run(main())


def test_every_kind_of_failing_unix_peer_gives_a_warning_naming_it(tmp_path):
    async def main():
        async with FakePeer("garbage", unix=True) as garbage, FakePeer("refuse", unix=True) as refusing, \
                FakePeer("hang", unix=True) as hanging, FakePeer("empty", unix=True) as empty:
            down = "unix:/nonexistent/mgw-peer.sock"
            bad = {garbage: "garbage", refusing: "refused", hanging: "timeout", down: "down"}
            settings = {"cluster.peers": [*bad, empty], "cluster.peer-timeout": "1s", **PARTIAL}
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                await _write(s, gw.url, "pm_local", 1.0)
                for path, params in [("/api/v1/query", {"query": SUM, "time": str(T_S)}),
                                     ("/api/v1/series", {"match[]": PM})]:
                    status, body = await _get(s, gw.url, path, **params)
                    assert status == 200, body
                    warnings = body["warnings"]
                    assert len(warnings) == len(bad), warnings
                    for url, kind in bad.items():
                        assert any(url + " " in w and f"({kind}:" in w for w in warnings), (url, kind, warnings)
                _, q = await _get(s, gw.url, "/api/v1/query", query=SUM, time=str(T_S))
                assert q["data"]["result"][0]["value"][1] == "1"

    asyncio.run(main())


def test_a_client_that_leaves_stops_the_read_of_a_unix_peer(tmp_path):
    async def main():
        peer = FakePeer("hang", unix=True)
        async with peer as hanging:
            settings = {"cluster.peers": [hanging], "cluster.peer-timeout": "10m"}
            async with serving(tmp_path / "gw", settings=settings) as gw, aiohttp.ClientSession() as s:
                request = asyncio.ensure_future(_get(s, gw.url, "/api/v1/query", query="up"))
                while peer.requests == 0:
                    await asyncio.sleep(0.01)
                request.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await request
                await asyncio.wait_for(peer.cancelled.wait(), 60)  # the worker closed its connection to the peer

    asyncio.run(main())


def test_a_peer_on_a_unix_socket(tmp_path):
    """unix:/path.sock: how a querier reaches the ingest shards of its own machine."""
    sock_dir = tempfile.mkdtemp(prefix="mgw-", dir="/tmp")  # a socket path must stay under ~100 bytes
    sock = os.path.join(sock_dir, "shard.sock")

    async def main():
        app = build_app(load({"storage.path": str(tmp_path / "shard")}))
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        await web.UnixSite(runner, sock).start()
        try:
            while not app[appkeys.STORAGE].ready:
                await asyncio.sleep(0.01)
            async with serving(tmp_path / "gw", settings={"cluster.peers": [f"unix:{sock}"]}) as gw, \
                    aiohttp.ClientSession() as s, \
                    aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock)) as over_socket:
                await _write(s, gw.url, "pm_local", 1.0)
                await _write(over_socket, "http://shard", "pm_peer", 2.0)
                status, body = await _get(s, gw.url, "/api/v1/query", query=SUM, time=str(T_S))
                assert status == 200 and "warnings" not in body, body
                assert body["data"]["result"][0]["value"][1] == "3"
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
