"""A write the server cannot take now (head full because flushing is behind) gets 503 with
Retry-After, never a 4xx: Prometheus retries 5xx, so a sender that retries loses nothing."""

from __future__ import annotations

import time

import pytest

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.guard.helpers import metric

FLUSH_MAX = 10  # the head refuses appends beyond 4 x this until the next flush (checked every second)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_metricsgw(tmp_path_factory.mktemp("guard-overload"),
                          extra=[f"--storage.flush-max-samples={FLUSH_MAX}"])
    srv.wait_ready()
    yield srv
    srv.stop()


def _request(i: int, t_ms: int) -> bytes:
    return encode_v1([([("__name__", "overload_test"), ("batch", str(i)), ("s", str(j))], [(t_ms, float(i))])
                      for j in range(5 * FLUSH_MAX)])


def test_head_full_is_503_and_a_retrying_sender_loses_nothing(server):
    t_ms = int(time.time() * 1000)
    statuses: list[int] = []
    overloaded = None
    for i in range(6):
        status, text, headers = remote_write(server.base_url, _request(i, t_ms))
        statuses.append(status)
        if status != 204 and overloaded is None:
            overloaded = (status, text, headers)
        # retry as Prometheus does (5xx only), until accepted
        deadline = time.monotonic() + 15
        while status != 204 and status >= 500 and time.monotonic() < deadline:
            time.sleep(0.3)
            status, text, headers = remote_write(server.base_url, _request(i, t_ms))
        assert status == 204, (status, text)
    assert overloaded is not None, f"never overloaded: {statuses}"
    status, text, headers = overloaded
    assert status == 503, (status, text)  # our failure: the sender must retry, not drop
    assert "head is full" in text and int(headers["Retry-After"]) >= 1
    assert metric(server.base_url, "metricsgw_remote_write_requests_total", version="1", code="503") >= 1
    # every batch arrived, once
    status, body = api(server.base_url, "/api/v1/query", {"query": "count by (batch) (overload_test)",
                                                          "time": t_ms / 1000})
    assert status == 200, body
    assert {r["metric"]["batch"]: r["value"][1] for r in body["data"]["result"]} == {
        str(i): str(5 * FLUSH_MAX) for i in range(6)}
