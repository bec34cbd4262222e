"""Every request Grafana's Prometheus data source sends (catalogue.py), sent to a real Prometheus 2.42 and to
metricsgw holding the same data, both ways Grafana can be configured (httpMethod POST and GET), answered alike:
same status, Content-Type, Content-Encoding (Grafana's Go client asks for gzip), envelope keys, status,
errorType and warnings, and the same data (PromQL results compared as tests/e2e/compare.py does).

Where metricsgw answers differently on purpose, the test names the difference and checks the documented
behaviour instead (buildinfo's version strings, metadata kept from remote write).
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
import zlib
from urllib.parse import urlencode

import pytest

from testkit.procs import start_metricsgw, start_prometheus
from tests.dashboards.loading import SmallControlPlaneWorkload, aligned_now_ms, write_workload
from tests.grafana.catalogue import Call, bad_calls, catalogue
from tests.grafana.exchange import differences, send

SCRAPES = 41  # 10 minutes at 15 s
FLUSH_EVERY_SAMPLES = 50_000  # several Parquet flushes plus the head: answers come from the merged read path
# The dashboard's time range as Grafana's picker gives it: "Last 30 minutes", a few seconds after the last scrape
NOW_AFTER_LAST_SAMPLE_MS = 7_321
RANGE_MS = 1_800_000

END_MS = aligned_now_ms()
TO_MS = END_MS + NOW_AFTER_LAST_SAMPLE_MS
FROM_MS = TO_MS - RANGE_MS
CALLS = catalogue(FROM_MS, TO_MS)
# Answered differently on purpose; each has its own test below.
OWN_TESTS = {"buildinfo", "metadata"}
COMPARED = [c for c in CALLS if c.name not in OWN_TESTS]
METHODS = ("POST", "GET")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    work = tmp_path_factory.mktemp("grafana")
    prom = start_prometheus(work / "prom")
    gw = start_metricsgw(work / "gw", extra=[f"--storage.flush-max-samples={FLUSH_EVERY_SAMPLES}",
                                            "--query.promql-compat=2"])  # compared with Prometheus 2.42
    try:
        prom.wait_ready()
        gw.wait_ready()
        workload = SmallControlPlaneWorkload(1, seed=3)
        for server in (prom, gw):
            write_workload(server.write_url, workload, END_MS, SCRAPES)
        yield gw.base_url, prom.base_url
    finally:
        gw.stop()
        prom.stop()


def _compared(pair, call: Call, method: str, custom: tuple = ()):
    """Both answers, after checking that Grafana would see no difference between them."""
    gw_url, prom_url = pair
    want, got = send(prom_url, call, method, custom), send(gw_url, call, method, custom)
    problems = differences(call, got, want)
    assert not problems, (f"{call.name} ({call.view}; {call.source}) via {method} {custom or ''}:\n"
                          + "\n".join(problems[:8]))
    return want, got


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("call", COMPARED, ids=[c.name for c in COMPARED])
def test_grafana_request_answered_as_prometheus(pair, call, method):
    want, _ = _compared(pair, call, method)
    assert want.status == 200, f"Prometheus refused {call.name}: {want.status} {want.raw[:300]!r}"


BAD = bad_calls(FROM_MS, TO_MS)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("call", BAD, ids=[c.name for c in BAD])
def test_grafana_error_answered_as_prometheus(pair, call, method):
    """Grafana shows the ``error`` text of a 400, 422 or 503 (its backend reads status, errorType and error)."""
    want, got = _compared(pair, call, method)
    assert want.status in (400, 422, 503) and want.body["status"] == "error", want.raw[:300]
    assert isinstance(got.body.get("error"), str) and got.body["error"], got.raw[:300]


def test_data_reaches_both_servers(pair):
    """The catalogue's calls ask about data both servers hold (else equal empty answers would prove little)."""
    gw_url, _ = pair
    by_name = {c.name: c for c in CALLS}
    for name, at_least in (("metric names", 40), ("label names", 20), ("validate selector", 2),
                           ("label_values(selector, label)", 1), ("metric search with label filters", 3),
                           ("values of a label for a selector", 8), ("all series, limited", 100),
                           ("label_values with an escaped multi-value", 8)):
        answer = send(gw_url, by_name[name], "POST")
        assert answer.status == 200 and len(answer.body["data"]) >= at_least, (name, answer.raw[:300])
    answer = send(gw_url, by_name["range query"], "POST")
    assert answer.body["data"]["result"] and len(answer.body["data"]["result"][0]["values"]) > 20


def _headline(answer) -> tuple:
    return answer.status, answer.content_type, answer.content_encoding


@pytest.mark.parametrize("method", METHODS)
def test_buildinfo_as_grafana_reads_it(pair, method):
    """pkg/promlib/heuristics.go: no ``features`` means Prometheus (Mimir otherwise, and Grafana would then call
    a ruler API we do not have); the version picks the labels-with-match[] API (>= 2.24, datasource.ts
    hasLabelsMatchAPISupport). Our version and revision are ours on purpose; the fields are Prometheus's."""
    gw_url, prom_url = pair
    call = next(c for c in CALLS if c.name == "buildinfo")
    want, got = send(prom_url, call, method), send(gw_url, call, method)
    assert _headline(got) == _headline(want)
    assert set(got.body["data"]) == set(want.body["data"]) and "features" not in got.body["data"]
    major, minor, *_ = (int(x) for x in got.body["data"]["version"].split("+")[0].split("."))
    assert (major, minor) >= (2, 24)


@pytest.mark.parametrize("method", METHODS)
def test_metadata_as_grafana_reads_it(pair, method):
    """Prometheus serves /api/v1/metadata from its scrape targets, so the receiving Prometheus here has none;
    metricsgw keeps the metadata remote write sends (docs/setup.md), which is what Grafana's metric picker shows.
    The shape is Prometheus's: {metric: [{type, help, unit}]}."""
    gw_url, prom_url = pair
    call = next(c for c in CALLS if c.name == "metadata")
    want, got = send(prom_url, call, method), send(gw_url, call, method)
    assert _headline(got) == _headline(want)
    assert want.body == {"status": "success", "data": {}}
    data = got.body["data"]
    assert data["DCGM_FI_DEV_GPU_UTIL"][0]["type"] == "gauge"
    assert data["apiserver_request_total"][0]["type"] == "counter"
    assert all(set(entry) == {"type", "help", "unit"} for entries in data.values() for entry in entries)


# pkg/promlib/middleware/custom_query_params.go puts the data source's customQueryParameters in the URL of every
# request, POSTs with a form body included; Prometheus ignores the ones it does not know (Thanos's, here).
CUSTOM = (("max_source_resolution", "auto"), ("partial_response", "true"), ("dedup", "true"))
WITH_CUSTOM = [c for c in COMPARED if c.name in ("range query", "instant query", "label names", "validate selector",
                                                  "label_values(selector, label)", "exemplars available?")]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("call", WITH_CUSTOM, ids=[c.name for c in WITH_CUSTOM])
def test_custom_query_parameters_ignored_as_prometheus(pair, call, method):
    want, _ = _compared(pair, call, method, CUSTOM)
    assert want.status == 200


LIMITED = {"all series, limited": "unordered", "label names, limited": "exact",
           "metric names, limited": "exact"}


@pytest.mark.parametrize("name", sorted(LIMITED))
def test_limit_truncates_as_documented(pair, name):
    """Grafana 12 sends ``limit=40000``. Prometheus 2.42 ignores ``limit`` (it came in 2.51); metricsgw honours
    it as later Prometheus versions do: at most ``limit`` items and the warning "results truncated due to limit".
    With a limit below what matches, the two answers differ on purpose."""
    gw_url, prom_url = pair
    base = next(c for c in CALLS if c.name == name)
    call = Call(base.name, base.view, base.source, base.path,
                tuple((k, "5" if k == "limit" else v) for k, v in base.params), base.form, base.result)
    want, got = send(prom_url, call, "POST"), send(gw_url, call, "POST")
    assert want.status == got.status == 200
    assert len(want.body["data"]) > 5 and "warnings" not in want.body  # 2.42: no limit
    assert len(got.body["data"]) == 5 and got.body["warnings"] == ["results truncated due to limit"]
    assert all(item in want.body["data"] for item in got.body["data"])


@pytest.mark.parametrize("accept", ["gzip", "deflate", "deflate, gzip", "br, gzip", "identity", "gzip;q=0", ""])
def test_content_coding_negotiated_as_prometheus(pair, accept):
    """Prometheus (util/httputil/compression.go) takes the first of gzip/deflate listed, reading no q-values;
    Grafana's backend sends ``gzip``, other clients other things."""
    answers = []
    for base in pair:
        req = urllib.request.Request(base + "/api/v1/labels", headers={"Accept-Encoding": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=60) as resp:
            coding, data = resp.headers.get("Content-Encoding", ""), resp.read()
        body = {"gzip": gzip.decompress, "deflate": zlib.decompress}.get(coding, bytes)(data)
        answers.append((coding, json.loads(body)["data"]))
    assert answers[0] == answers[1]


GET_ONLY = [c for c in CALLS if c.path.startswith(("/api/v1/label/", "/api/v1/metadata", "/api/v1/rules",
                                                    "/api/v1/status/buildinfo"))]


@pytest.mark.parametrize("call", GET_ONLY, ids=[c.name for c in GET_ONLY])
def test_post_to_get_only_endpoint_refused_as_prometheus(pair, call):
    """Grafana versions whose endpointsSupportOnlyGet entries carry a leading slash ("/api/v1/rules") never match
    the resource path ("api/v1/rules") and POST these calls; client.go QueryResource then retries as a GET on
    400 or 405. That works only if the POST is refused as Prometheus refuses it."""
    answers = []
    for base in pair:
        req = urllib.request.Request(f"{base}{call.path}?{urlencode(call.params)}", data=b"", method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                answers.append(resp.status)
        except urllib.error.HTTPError as err:
            answers.append(err.code)
    assert answers[0] == answers[1] and answers[1] in (400, 405), answers
