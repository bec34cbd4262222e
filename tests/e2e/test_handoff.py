"""A client's connection passed from the front to the query process (metricsgw/procs/handoff.py), through a real
`metricsgw serve` and kept-alive HTTP/1.1 connections as Grafana keeps them: the query and every later request
on that connection answer as before (the front's own routes relayed back to it), a large request is proxied,
and with passwords configured nothing is passed, so every request is still checked. A sender's connection is
passed to the one ingest shard the same way, and with two shards it stays with the front, which splits writes."""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.parse

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.procs_helpers import wait_for
from tests.guard.helpers import metric
from tests.web.certs import bcrypt_hash

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _connect(base_url: str, timeout: float = 60) -> http.client.HTTPConnection:
    """A kept-alive connection to the front, as Grafana or Prometheus's sender keeps one."""
    host, port = base_url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def _post_form(conn: http.client.HTTPConnection, path: str, params: dict, headers: dict | None = None):
    conn.request("POST", path, urllib.parse.urlencode(params), {**FORM, **(headers or {})})
    resp = conn.getresponse()
    return resp.status, resp.read()


def _handed_off(base_url: str, child: str = "querier-0") -> float:
    return metric(base_url, "metricsgw_front_handed_off_connections_total", process="front", child=child)


WRITE_HEADERS = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                 "X-Prometheus-Remote-Write-Version": "0.1.0"}


def _write(conn: http.client.HTTPConnection, name: str, t_ms: int, value: float) -> tuple[int, bytes]:
    conn.request("POST", "/api/v1/write", encode_v1([([("__name__", name), ("k", "v")], [(t_ms, value)])]),
                 WRITE_HEADERS)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _proxied(base_url: str) -> float:
    return sum(metric(base_url, "metricsgw_front_proxied_requests_total", process="front", child="querier-0",
                      code=code) for code in ("200", "400"))


def test_a_passed_connection_answers_every_route_as_the_front_does(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=["--ingest.shards=1", "--query.processes=1"])
    try:
        gw.wait_ready()
        conn = _connect(gw.base_url)
        status, body = _post_form(conn, "/api/v1/query", {"query": "vector(1)", "time": time.time()})
        assert status == 200 and json.loads(body)["data"]["result"][0]["value"][1] == "1", body
        assert _handed_off(gw.base_url) == 1
        sock = conn.sock
        t_ms = (int(time.time()) - 60) * 1000
        # the same connection, now the query process's: the front's routes are relayed to the front
        assert _write(conn, "passed_on", t_ms, 7.0) == (204, b"")
        assert metric(gw.base_url, "metricsgw_ingested_samples_total", process="shard-0") == 1  # the shard took it
        assert metric(gw.base_url, "metricsgw_ingested_samples_total", process="querier-0") == 0
        conn.request("GET", "/-/ready")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"metricsgw is Ready.\n")
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode()
        assert resp.status == 200 and 'metricsgw_front_handed_off_connections_total{process="front"' in text
        assert "process=\"shard-0\"" in text  # the gateway's /metrics (every process), not the query process's own
        status, body = _post_form(conn, "/api/v1/query", {"query": "passed_on", "time": t_ms / 1000})
        assert status == 200 and json.loads(body)["data"]["result"] == [
            {"metric": {"__name__": "passed_on", "k": "v"}, "value": [t_ms / 1000, "7"]}], body
        conn.request("GET", "/api/v1/label/k/values")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["data"] == ["v"]
        assert conn.sock is sock, "the client had to reconnect"
        assert _handed_off(gw.base_url) == 1  # one connection, passed once

        # A body too large to pass in one message: proxied, answered all the same.
        big = _connect(gw.base_url)
        before = _proxied(gw.base_url)
        status, body = _post_form(big, "/api/v1/query", {"query": "vector(2)" + " " * 40_000, "time": time.time()})
        assert status == 200 and json.loads(body)["data"]["result"][0]["value"][1] == "2", body[:300]
        wait_for(lambda: _proxied(gw.base_url) == before + 1, "the front counting the proxied query")
        assert _handed_off(gw.base_url) == 1
        conn.close()
        big.close()
    finally:
        gw.stop()


def test_a_senders_connection_goes_to_the_one_shard_and_its_other_requests_back_to_the_front(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=["--ingest.shards=1", "--query.processes=1"])
    try:
        gw.wait_ready()
        conn = _connect(gw.base_url)
        t_ms = (int(time.time()) - 120) * 1000
        assert _write(conn, "sent", t_ms, 1.0) == (204, b"")
        assert _handed_off(gw.base_url, "shard-0") == 1
        sock = conn.sock
        for i in range(1, 5):  # the shard's own now: the front answers none of them
            assert _write(conn, "sent", t_ms + i * 1000, float(i + 1)) == (204, b"")
        assert metric(gw.base_url, "metricsgw_front_write_requests_total", process="front", code="204") == 0
        assert metric(gw.base_url, "metricsgw_remote_write_requests_total", process="shard-0", code="204",
                      version="1") == 5
        # A query on the sender's connection: relayed to the front, which proxies it to the query process
        status, body = _post_form(conn, "/api/v1/query", {"query": "count_over_time(sent[1m])",
                                                          "time": t_ms / 1000 + 10})
        assert status == 200 and json.loads(body)["data"]["result"] == [
            {"metric": {"k": "v"}, "value": [t_ms / 1000 + 10, "5"]}], body
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200 and 'process="querier-0"' in resp.read().decode()  # the gateway's, every process
        conn.request("GET", "/api/v1/write")  # a route of the front, another method: its 405
        resp = conn.getresponse()
        assert resp.status == 405 and resp.read()
        # A malformed write on that connection gets the shard's 400, naming what is wrong, as through the front
        conn.request("POST", "/api/v1/write", b"not snappy", WRITE_HEADERS)
        resp = conn.getresponse()
        assert resp.status == 400 and b"snappy" in resp.read()
        assert _write(conn, "sent", t_ms + 5000, 6.0) == (204, b"")
        assert conn.sock is sock, "the client had to reconnect"
        assert _handed_off(gw.base_url, "shard-0") == 1
        assert _handed_off(gw.base_url, "querier-0") == 0  # the query went through the front, not by a hand-off
        conn.close()
    finally:
        gw.stop()


def test_with_two_shards_a_senders_connection_stays_with_the_front(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=["--ingest.shards=2", "--query.processes=1"])
    try:
        gw.wait_ready()
        conn = _connect(gw.base_url)
        t_ms = (int(time.time()) - 120) * 1000
        for i in range(3):
            assert _write(conn, "split", t_ms + i * 1000, 1.0) == (204, b"")
        assert metric(gw.base_url, "metricsgw_front_write_requests_total", process="front", code="204") == 3
        assert _handed_off(gw.base_url, "shard-0") == _handed_off(gw.base_url, "shard-1") == 0
        conn.close()
    finally:
        gw.stop()


def test_with_passwords_nothing_is_passed_and_every_request_is_checked(tmp_path):
    web_config = tmp_path / "web.yml"
    web_config.write_text(f"basic_auth_users:\n  alice: {bcrypt_hash('secret')}\n")
    gw = start_metricsgw(tmp_path / "gw", extra=["--ingest.shards=1", "--query.processes=1",
                                                 f"--web.config.file={web_config}"])
    good = {"Authorization": "Basic " + base64.b64encode(b"alice:secret").decode()}
    try:
        wait_for(lambda: _ready(gw.base_url, good), "the gateway ready")
        conn = _connect(gw.base_url)
        assert _post_form(conn, "/api/v1/query", {"query": "vector(1)"}, good)[0] == 200
        # the same connection without credentials: the front still checks it (it was not passed on)
        assert _post_form(conn, "/api/v1/query", {"query": "vector(1)"})[0] == 401
        assert _post_form(conn, "/api/v1/query", {"query": "vector(1)"}, good)[0] == 200
        # nor a sender's: a write without credentials on a connection that wrote with them is refused
        t_ms = (int(time.time()) - 60) * 1000
        body = encode_v1([([("__name__", "pw"), ("k", "v")], [(t_ms, 1.0)])])
        conn.request("POST", "/api/v1/write", body, {**WRITE_HEADERS, **good})
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (204, b"")
        conn.request("POST", "/api/v1/write", body, WRITE_HEADERS)
        resp = conn.getresponse()
        assert resp.status == 401 and resp.read() is not None  # the front checked it: it was not passed on
        conn.close()
    finally:
        gw.stop()


def _ready(base_url: str, headers: dict) -> bool:
    conn = _connect(base_url, timeout=10)
    try:
        conn.request("GET", "/-/ready", headers=headers)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()
