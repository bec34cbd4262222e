"""Broken requests, each with its expected status and message, against a real server process.

The server is a subprocess, so a query that crashes the PromQL parser (a Rust extension that
overflows its stack on deep input) fails these tests instead of killing pytest; after the table
the server must still be the same process, and the stored data unchanged.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.parse

import pytest

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write

DEEP_PARENS = "(" * 10_000 + "1" + ")" * 10_000  # segfaulted the parser
MANY_TERMS = "+".join(["1"] * 20_000)  # segfaulted the parser
DEEP_CALLS = "abs(" * 5_000 + "bad_input_test" + ")" * 5_000  # answered 500 (Python RecursionError)
INVALID_UTF8 = b'bad_input_test{job="\xff"}'

Q, QR, FMT, EX = "/api/v1/query", "/api/v1/query_range", "/api/v1/format_query", "/api/v1/query_exemplars"
SERIES, LABELS = "/api/v1/series", "/api/v1/labels"

# (id, path, params, status, message fragment)
CASES = [
    ("empty query", Q, {"query": ""}, 400, "no expression found in input"),
    ("syntax error", Q, {"query": "sum("}, 400, "unclosed left parenthesis"),
    ("deep parens", Q, {"query": DEEP_PARENS}, 400, "nests brackets 10,000 deep, over the limit of 128 (--query.max-depth)"),
    ("many terms", Q, {"query": MANY_TERMS}, 400, "has 20,000 terms, over the limit of 1,000 (--query.max-terms)"),
    ("deep calls", Q, {"query": DEEP_CALLS}, 400, "(--query.max-depth)"),
    ("too long", Q, {"query": "bad_input_test" + " " * 70_000}, 400, "over the limit of 65,536 (--query.max-length)"),
    ("brackets in strings do not count", Q, {"query": 'count(bad_input_test{job!="' + "(" * 500 + '"})'}, 200, ""),
    ("time 1e20", Q, {"query": "1", "time": "1e20"}, 400, 'cannot parse "1e20" to a valid timestamp. It overflows int64'),
    ("time -1e20", Q, {"query": "1", "time": "-1e20"}, 400, "It overflows int64"),
    ("time max int64", Q, {"query": "1", "time": "9223372036854775807"}, 400, "It overflows int64"),
    ("time NaN", Q, {"query": "1", "time": "NaN"}, 400, 'cannot parse "NaN" to a valid timestamp'),
    ("time text", Q, {"query": "1", "time": "abc"}, 400, "Invalid time value for 'time': cannot parse \"abc\""),
    ("timeout text", Q, {"query": "1", "timeout": "abc"}, 400, 'invalid parameter "timeout"'),
    ("timeout overflow", Q, {"query": "1", "timeout": "1e20"}, 400, "It overflows int64"),
    ("invalid utf-8 query", Q, {"query": INVALID_UTF8}, 400, 'invalid parameter "query": invalid UTF-8'),
    ("invalid utf-8 name", Q, {"query": "1", b"\xfe": "x"}, 400, "invalid parameter name: invalid UTF-8"),
    ("subquery of 31.5e9 steps", Q, {"query": "max_over_time(bad_input_test[1y:1ms])"}, 422,
     "in subquery steps (about 7568640000"),  # answered 500 (numpy could not allocate 235 GiB); refused by
    #   its memory (--query.max-memory-per-query), which its grid alone would cross: --query.max-samples is counted as
    #   Prometheus counts, and Prometheus holds none of a subquery's steps without a point
    ("negative @", Q, {"query": "bad_input_test @ -1"}, 400, "negative timestamp"),
    ("range: end before start", QR, {"query": "1", "start": "10", "end": "0", "step": "1"}, 400,
     "end timestamp must not be before start time"),
    ("range: zero step", QR, {"query": "1", "start": "0", "end": "10", "step": "0"}, 400, "zero or negative"),
    ("range: step 1e20", QR, {"query": "1", "start": "0", "end": "10", "step": "1e20"}, 400, "It overflows int64"),
    ("range: step text", QR, {"query": "1", "start": "0", "end": "10", "step": "x"}, 400, 'cannot parse "x"'),
    ("range: no start", QR, {"query": "1", "end": "10", "step": "1"}, 400, 'invalid parameter "start"'),
    ("range: end 1e20", QR, {"query": "1", "start": "0", "end": "1e20", "step": "1"}, 400, "It overflows int64"),
    ("range: too many points", QR, {"query": "1", "start": "0", "end": "100000", "step": "1"}, 400,
     "exceeded maximum resolution of 11,000 points"),
    ("range: range vector", QR, {"query": "bad_input_test[5m]", "start": "0", "end": "10", "step": "1"}, 400,
     'invalid expression type "range vector"'),
    ("range: many terms", QR, {"query": MANY_TERMS, "start": "0", "end": "10", "step": "1"}, 400, "--query.max-terms"),
    ("range: invalid utf-8", QR, {"query": INVALID_UTF8, "start": "0", "end": "10", "step": "1"}, 400, "invalid UTF-8"),
    ("series: no match[]", SERIES, {}, 400, "no match[] parameter provided"),
    ("series: not a selector", SERIES, {"match[]": "sum(bad_input_test)"}, 400, "is not a series selector"),
    ("series: empty matchers", SERIES, {"match[]": '{job=""}'}, 400, "at least one non-empty matcher"),
    ("series: invalid utf-8", SERIES, {"match[]": INVALID_UTF8}, 400, 'invalid parameter "match[]": invalid UTF-8'),
    ("series: deep", SERIES, {"match[]": DEEP_PARENS}, 400, 'invalid parameter "match[]": the query nests'),
    ("series: start 1e20", SERIES, {"match[]": "bad_input_test", "start": "1e20"}, 400, "It overflows int64"),
    ("series: limit text", SERIES, {"match[]": "bad_input_test", "limit": "x"}, 400, 'invalid parameter "limit"'),
    ("labels: syntax", LABELS, {"match[]": "{"}, 400, 'invalid parameter "match[]"'),
    ("labels: invalid utf-8", LABELS, {"match[]": INVALID_UTF8}, 400, "invalid UTF-8"),
    ("labels: end text", LABELS, {"end": "abc"}, 400, 'invalid parameter "end"'),
    ("values: digit first", "/api/v1/label/1abc/values", {}, 400, 'invalid label name: "1abc"'),
    ("values: dash", "/api/v1/label/a-b/values", {}, 400, 'invalid label name: "a-b"'),
    ("values: invalid utf-8", "/api/v1/label/%ff/values", {}, 400, 'invalid label name: "\\xff"'),
    ("values: bad match[]", "/api/v1/label/job/values", {"match[]": INVALID_UTF8}, 400, "invalid UTF-8"),
    ("values: __name__ is fine", "/api/v1/label/__name__/values", {}, 200, ""),
    ("exemplars: start after end", EX, {"query": "bad_input_test", "start": "10", "end": "0"}, 400,
     "end timestamp must not be before start timestamp"),
    ("exemplars: start text", EX, {"query": "bad_input_test", "start": "abc"}, 400, 'invalid parameter "start"'),
    ("exemplars: syntax", EX, {"query": "sum("}, 400, "unclosed left parenthesis"),
    ("exemplars: deep", EX, {"query": DEEP_PARENS}, 400, "--query.max-depth"),
    ("exemplars: invalid utf-8", EX, {"query": INVALID_UTF8}, 400, "invalid UTF-8"),
    ("format: syntax", FMT, {"query": "sum("}, 400, "unclosed left parenthesis"),
    ("format: many terms", FMT, {"query": MANY_TERMS}, 400, "--query.max-terms"),
    ("format: invalid utf-8", FMT, {"query": INVALID_UTF8}, 400, "invalid UTF-8"),
    # at the limits: answered
    ("128 deep", Q, {"query": "(" * 128 + "1" + ")" * 128}, 200, ""),
    ("1,000 terms", Q, {"query": "+".join(["1"] * 1000)}, 200, ""),
    ("127 nested calls", Q, {"query": "abs(" * 127 + "bad_input_test" + ")" * 127}, 200, ""),
    ("1,000 terms of vectors", Q, {"query": "+".join(["bad_input_test"] * 1000)}, 200, ""),
]
GET_ONLY = {"/api/v1/label/1abc/values", "/api/v1/label/a-b/values", "/api/v1/label/%ff/values",
            "/api/v1/label/job/values", "/api/v1/label/__name__/values"}
MAX_URL = 8000  # aiohttp's request line limit (8190): longer queries only go in a POST body


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_metricsgw(tmp_path_factory.mktemp("bad-input"))
    srv.wait_ready()
    now_ms = int(time.time() * 1000) // 1000 * 1000
    series = [([("__name__", "bad_input_test"), ("job", f"j{i}")], [(now_ms - k * 15_000, float(i * 10 + k))
                                                                    for k in range(4)]) for i in range(3)]
    status, text, _ = remote_write(srv.base_url, encode_v1(series))
    assert status == 204, text
    srv.now_s = now_ms / 1000
    yield srv
    srv.stop()


def _stored(srv) -> tuple:
    status, body = api(srv.base_url, QR, {"query": '{__name__=~".+"}', "start": srv.now_s - 120,
                                           "end": srv.now_s, "step": "15"})
    assert status == 200, body
    status, names = api(srv.base_url, "/api/v1/label/__name__/values")
    return body["data"]["result"], names["data"]


@pytest.fixture(scope="module")
def stored_before(server):
    return _stored(server)


def _methods(path: str, params: dict) -> list[str]:
    if path in GET_ONLY:
        return ["GET"]
    url_len = len(path) + len(urllib.parse.urlencode(params, doseq=True))
    return ["GET", "POST"] if url_len < MAX_URL else ["POST"]


@pytest.mark.parametrize("name,path,params,status,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_request_is_4xx_with_a_message(server, stored_before, name, path, params, status, fragment):
    for method in _methods(path, params):
        got, body = api(server.base_url, path, params, method=method)
        assert got == status, (method, got, str(body)[:300])
        if status >= 400:
            assert body["status"] == "error", body
            assert body["errorType"] == {400: "bad_data", 422: "execution"}[status], body
            assert fragment in body["error"], (method, body["error"][:300])
    assert server.proc.poll() is None, "the server died"


def test_nothing_stored_changed_and_the_server_lived(server, stored_before):
    # runs after the table (pytest keeps file order)
    assert server.proc.poll() is None
    assert _stored(server) == stored_before
    status, body = api(server.base_url, Q, {"query": "count(bad_input_test)", "time": server.now_s})
    assert status == 200 and body["data"]["result"][0]["value"][1] == "3"


CHECK_THEN_PARSE = """
import sys
from metricsgw.errors import BadData
from metricsgw.limits.query_text import QueryTextLimits
from metricsgw.promql import parser
query = sys.stdin.read()
try:
    QueryTextLimits().check(query)
    parser.parse(query)
    print("parsed")
except BadData as err:
    print("refused", err)
"""


@pytest.mark.parametrize("query", [DEEP_PARENS, MANY_TERMS, DEEP_CALLS, "-(" * 10_000 + "1" + ")" * 10_000,
                                   "sum(" * 10_000 + "x" + ")" * 10_000],
                         ids=["parens", "terms", "calls", "negations", "aggregations"])
def test_the_check_runs_before_the_parser_can_crash(query):
    # In a subprocess: were the check to let one through, the parser's segfault fails this test only.
    proc = subprocess.run([sys.executable, "-c", CHECK_THEN_PARSE], input=query, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-500:]}"
    assert proc.stdout.startswith("refused"), proc.stdout
