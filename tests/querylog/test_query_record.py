"""A query record as the query log writes it: Prometheus's query_log_file line (2.42's field names and time format)
plus metricsgw's fields, read back to the same record (the way a query process's records reach the front), and
the status and limit an error makes."""

from __future__ import annotations

import asyncio

import pytest
from multidict import CIMultiDict

from metricsgw.errors import BadData, LimitExceeded, QueryCanceled, QueryTimeout, TooManyRequests, Unavailable
from metricsgw.querylog.record import QueryRecord, Source, format_ts, from_line, grafana_headers, outcome, to_line

T = 1796400000.25  # 2026-12-04T16:00:00.250Z

RANGE = QueryRecord(
    query='sum(rate(x{job="a"}[5m]))', ts=T + 1.5, status="refused", limit="--query.max-samples",
    error="query processing would load too many samples (raise --query.max-samples)",
    source=Source("10.0.0.7", "POST", "/api/v1/query_range", "Grafana/10.4.1",
                  {"X-Dashboard-Uid": "gpu", "X-Panel-Id": "7"}),
    start=T - 3600, end=T, step=60, total_s=1.25, queue_s=0.5, eval_s=0.75, samples=12_345, peak_samples=999,
    peak_bytes=1 << 20, response_bytes=0)


def test_the_line_is_prometheus_query_log_format_with_our_fields():
    assert to_line(RANGE, slow=True) == {
        "httpRequest": {"clientIP": "10.0.0.7", "method": "POST", "path": "/api/v1/query_range"},
        "params": {"query": 'sum(rate(x{job="a"}[5m]))', "start": "2026-12-04T15:00:00.250Z",
                   "end": "2026-12-04T16:00:00.250Z", "step": 60},
        "stats": {"timings": {"evalTotalTime": 0.75, "execQueueTime": 0.5, "execTotalTime": 1.25},
                  "samples": {"totalQueryableSamples": 12_345, "peakSamples": 999}},
        "ts": "2026-12-04T16:00:01.750Z",
        "error": "query processing would load too many samples (raise --query.max-samples)",
        "status": "refused", "limit": "--query.max-samples", "userAgent": "Grafana/10.4.1",
        "grafana": {"X-Dashboard-Uid": "gpu", "X-Panel-Id": "7"},
        "bytes": {"peak": 1 << 20, "response": 0},
        "slow": True,
    }


def test_an_answered_query_has_no_error_limit_or_slow_and_no_window_before_its_times_were_read():
    r = QueryRecord(query="up", source=Source("127.0.0.1", "GET", "/api/v1/query"), ts=T)
    line = to_line(r)
    assert line["params"] == {"query": "up"}
    assert line["status"] == "ok"
    assert not {"error", "limit", "slow", "userAgent", "grafana"} & set(line)


@pytest.mark.parametrize("record", [RANGE, QueryRecord(query="up", source=Source(), ts=T)])
def test_a_line_reads_back_to_its_record(record):
    assert from_line(to_line(record)) == record


def test_times_are_utc_milliseconds():
    assert format_ts(0) == "1970-01-01T00:00:00.000Z"
    assert format_ts(1.123) == "1970-01-01T00:00:01.123Z"  # 1.123 is 1.12299... in binary: rounded, not cut
    assert format_ts(59.9999) == "1970-01-01T00:01:00.000Z"  # rounded, never "60.1000"


@pytest.mark.parametrize("err, want", [
    (None, ("ok", "")),
    (LimitExceeded("too many samples in x (more than 5; raise --query.max-samples or narrow the query)"),
     ("refused", "--query.max-samples")),
    (BadData('invalid parameter "query": the query is 9 bytes long, over the limit of 5 (--query.max-length)'),
     ("refused", "--query.max-length")),
    (QueryTimeout("query timed out in evaluation after 1s (limit: --query.timeout; ...)"), ("timeout", "--query.timeout")),
    (QueryCanceled("query canceled in evaluation: the client went away"), ("canceled", "")),
    (asyncio.CancelledError(), ("canceled", "")),
    (BadData("1:5: parse error: unexpected end of input"), ("error", "")),
    (Unavailable("ingest shard 0 is restarting; retry in a few seconds"), ("error", "")),
])
def test_outcome(err, want):
    assert outcome(err) == want


def test_the_guard_names_the_limit_that_refused_though_its_message_names_two():
    full = TooManyRequests("too many queries (limits --query.max-concurrency=1, --query.max-queue=0)")
    full.setting = "--query.max-queue"
    assert outcome(full) == ("refused", "--query.max-queue")


def test_a_timeout_without_a_flag_in_its_words_names_the_setting_of_its_deadline():
    assert outcome(QueryTimeout("deadline passed"), "--query.metadata-timeout") == ("timeout", "--query.metadata-timeout")


def test_grafana_headers_by_their_names_whatever_the_case_sent_and_cut_when_long():
    headers = CIMultiDict({"x-dashboard-uid": "abc", "X-PANEL-ID": "3", "Authorization": "Basic c2VjcmV0",
                           "X-Grafana-Org-Id": "1", "X-Query-Group-Id": "q" * 1000})
    got = grafana_headers(headers)
    assert got == {"X-Dashboard-Uid": "abc", "X-Panel-Id": "3", "X-Grafana-Org-Id": "1", "X-Query-Group-Id": "q" * 256}


def test_only_a_setting_is_taken_for_the_limit_not_dashes_in_a_quoted_query():
    assert outcome(BadData('1:3: parse error: unexpected "--x.y" in "1 --x.y"')) == ("error", "")
    assert outcome(LimitExceeded('blocked "a--b" by --query.blocked rule 1')) == ("refused", "--query.blocked")
