"""One classifier of a failed call and one rule for primaries (cluster/failures.py, cluster/policy.py): the words a
user reads never hold a socket path or an exception's class, whichever client failed."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from metricsgw.cluster import gateway_head, unix_http
from metricsgw.cluster.failures import Failure, Refused, classify
from metricsgw.cluster.policy import primaries
from metricsgw.errors import BadData, ForwardedError, Unavailable


@pytest.mark.parametrize("err, timeout_s, want", [
    (asyncio.TimeoutError(), None, ("timeout", "does not answer in time")),
    (unix_http.Timeout(), 2.0, ("timeout", "did not answer within 2s")),
    (Refused(503, b'{"status":"error","error":"not ready"}'), None, ("refused", "answered HTTP 503: not ready")),
    (BadData("unexpected Content-Type 'text/html'"), None,
     ("garbage", "gave an answer that could not be read (unexpected Content-Type 'text/html')")),
    (ValueError("Expecting value: line 1"), None, ("garbage", "gave an answer that could not be read")),
    (ConnectionRefusedError(111, "refused: /run/x/shard-1.sock"), None, ("down", "does not accept connections")),
    (FileNotFoundError(2, "/run/x/shard-1.sock"), None, ("down", "does not accept connections")),
    (aiohttp.ServerDisconnectedError(), None, ("down", "closed the connection")),
    (ConnectionResetError("the peer closed the connection mid-answer"), None, ("down", "closed the connection")),
    (None, None, ("down", "cannot be reached")),
])
def test_a_failed_call_is_one_result_and_plain_words_whichever_client_made_it(err, timeout_s, want):
    got = classify(err, timeout_s)
    assert (got.result, got.reason) == want
    assert "sock" not in got.reason and "Error" not in got.reason


def test_a_refusal_keeps_its_status_and_own_message():
    got = classify(Refused(422, b'{"status":"error","error":"over the reservation"}'))
    assert (got.status, got.said) == (422, "over the reservation")


def test_primaries_answer_whole_or_not_at_all():
    assert primaries([("ingest shard 0", 1), ("ingest shard 1", 2)]) == [1, 2]
    with pytest.raises(Unavailable) as err:
        primaries([("ingest shard 0", 1), ("ingest shard 1", Failure("timeout", "did not answer within 2s"))])
    assert str(err.value).startswith("ingest shard 1 did not answer within 2s; ")
    assert err.value.status == 503


def test_a_request_every_primary_refuses_alike_is_refused_as_they_said():
    bad = classify(Refused(400, b'{"status":"error","error":"bad match[]"}'))
    with pytest.raises(ForwardedError) as err:
        primaries([("ingest shard 0", bad), ("ingest shard 1", bad)])
    assert (err.value.status, str(err.value)) == (400, "bad match[]")
    with pytest.raises(Unavailable):  # one shard's 4xx beside another's answer: the gateway's answer is missing
        primaries([("ingest shard 0", bad), ("ingest shard 1", 2)])


@pytest.mark.parametrize("method, path, mine", [
    ("POST", "/api/v1/read?scope=head", True),
    ("GET", "/api/v1/read?scope=head", False),
    ("POST", "/api/v1/read?scope=tail", False),
    ("POST", "/api/v1/read", False),
    ("GET", "/api/v1/metadata?scope=head", True),
    ("GET", "/api/v1/label/job/values?scope=head", True),
    ("GET", "/api/v1/series?scope=head", False),
])
def test_the_front_answers_only_a_peer_gateways_head_read_itself(method, path, mine):
    assert gateway_head.answers(make_mocked_request(method, path)) is mine
