"""The catalogue builds requests the way Grafana's source does (no servers needed)."""

from __future__ import annotations

from tests.grafana.catalogue import (Call, aligned, bad_calls, catalogue, go_float, range_query, snapped, transport,
                                     unsnapped)

FROM_MS, TO_MS = 1_700_000_012_345, 1_700_001_812_345


def test_times_as_grafana_rounds_them():
    # getPrometheusTime is ceil for start and end alike; the snap floors start and ceils end to the minute
    assert unsnapped(FROM_MS, TO_MS) == (("start", "1700000013"), ("end", "1700001813"))
    assert snapped(FROM_MS, TO_MS) == (("start", "1699999980"), ("end", "1700001840"))
    assert snapped(1_700_000_040_000, 1_700_000_040_000) == (("start", "1700000040"), ("end", "1700000100"))
    # AlignTimeRange floors to the step; FormatFloat(x, 'f', -1, 64) writes no ".0" and no exponent
    assert aligned(1_700_000_013.7, 15) == 1_700_000_010 and aligned(7.25, 0.5) == 7.0
    assert aligned(1000, 120, utc_offset_s=20700) == 900  # UTC+05:45: steps start at local multiples of 2m
    assert [go_float(x) for x in (15.0, 0.5, 1_700_001_812.345, 1e-06)] == ["15", "0.5", "1700001812.345", "0.000001"]
    assert range_query("up", FROM_MS, TO_MS, 30) == (("query", "up"), ("start", "1700000010"), ("end", "1700001810"),
                                                      ("step", "30"))


def test_transport_follows_grafanas_backend():
    form = Call("q", "v", "s", "/api/v1/query", (("query", "up"),), form=True)
    values = Call("v", "v", "s", "/api/v1/label/job/values", (("start", "1"),))
    exemplars = Call("e", "v", "s", "/api/v1/query_exemplars", (("query", "test"),))
    post = transport(form, "POST")
    assert (post.method, post.url, post.body) == ("POST", "/api/v1/query", b"query=up")
    assert post.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert post.headers["Accept-Encoding"] == "gzip"
    as_get = transport(values, "POST")  # endpointsSupportOnlyGet
    assert (as_get.method, as_get.url) == ("GET", "/api/v1/label/job/values?start=1")
    ex = transport(exemplars, "POST")  # a frontend GET the backend sends as a POST, parameters kept in the URL
    assert (ex.method, ex.url, ex.body) == ("POST", "/api/v1/query_exemplars?query=test", b"")
    get = transport(form, "GET")
    assert (get.method, get.url, get.body) == ("GET", "/api/v1/query?query=up", b"")
    custom = transport(form, "POST", (("dedup", "true"),))
    assert (custom.url, custom.body) == ("/api/v1/query?dedup=true", b"query=up")


def test_every_call_names_its_source():
    calls = catalogue(FROM_MS, TO_MS) + bad_calls(FROM_MS, TO_MS)
    assert len({c.name for c in calls}) == len(calls)
    assert all(c.view and c.source and c.path.startswith("/api/v1/") for c in calls)
    assert all(c.result in ("exact", "unordered", "promql") for c in calls)
