"""Three gateways that each hold a third of the data answer every query as one gateway holding all of it.

Each gateway runs on its own --storage.path with --cluster.peers of the other two; the workload
(2 GPU nodes + 1 control-plane node, 40 minutes at 15 s, plus the edge-case series of
test_differential) is split by series over them, as Prometheus's hashmod relabelling splits a
sender's series, and written whole to a reference gateway with no peers. Their heads are never
flushed here (long --storage.flush-interval), so a gateway's data is exactly its recent data: what
it serves its peers. (With one shared table, flushed data comes from the table instead; see
docs/cluster.md.)

Every query of the dashboard set -- tests/e2e/queries.py, testkit/panels.py and every panel of the
shipped dashboards -- and the metadata calls, asked of any gateway, must equal the reference's
answer, without warnings. Then one gateway is killed with SIGKILL: the others answer 503 naming it,
or, asked for a partial answer (partial_response=true), 200 with a warning naming it, lacking exactly
its series; restarted on the same storage (WAL replay), the answers are complete again.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from testkit.load import send_all
from testkit.procs import Server, free_port, start_metricsgw
from testkit.panels import DASHBOARD_QUERIES
from testkit.wire import build_requests, metadata_request
from tests.dashboards.grafana import interpolate, load_dashboards, resolve_variables, targets
from tests.dashboards.loading import (INTERVAL_MS, SmallControlPlaneWorkload, aligned_now_ms, in_parallel,
                                      provoke_discard_and_guard_rejection, scrape_into, write_series)
from tests.e2e import queries
from tests.e2e.client import api
from tests.e2e.compare import compare_servers
from tests.e2e.test_differential import GPU_NODES, INSTANTS, RANGES, SCRAPES, SELF_SCRAPES, edge_case_series

GATEWAYS = 3
# Nothing is flushed while the test runs: a gateway's data is all recent data, served to its peers.
HEAD_ONLY = ["--storage.flush-interval=24h", "--storage.flush-max-samples=100000000"]
DASHBOARDS = load_dashboards()
DASHBOARD_TARGETS = [t for name, d in DASHBOARDS.items() for t in targets(name, d)]
METADATA_CALLS = [
    ("/api/v1/series", {"match[]": "up"}),
    ("/api/v1/series", {"match[]": ['{__name__=~"DCGM_FI_DEV_GPU_.*", gpu="1"}', "stale_test"]}),
    ("/api/v1/series", {"match[]": '{__name__=~".+"}'}),
    ("/api/v1/labels", {}),
    ("/api/v1/labels", {"match[]": "apiserver_request_total"}),
    ("/api/v1/label/__name__/values", {}),
    ("/api/v1/label/Hostname/values", {}),
    ("/api/v1/label/case/values", {"match[]": "irregular_total"}),
    ("/api/v1/label/verb/values", {"match[]": 'apiserver_request_total{code="200"}'}),
]


class Cluster:
    def __init__(self, work) -> None:
        self.work = work
        self.ports = [free_port() for _ in range(GATEWAYS)]
        self.gateways: list[Server] = [self._start(i) for i in range(GATEWAYS)]
        self.reference = start_metricsgw(work / "reference", extra=HEAD_ONLY)

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def _start(self, i: int) -> Server:
        peers = [f"--cluster.peers={self.url(j)}" for j in range(GATEWAYS) if j != i]
        return start_metricsgw(self.work / f"gw{i}", port=self.ports[i], extra=HEAD_ONLY + peers)

    def kill(self, i: int) -> None:
        self.gateways[i].proc.kill()  # SIGKILL: no final flush, the WAL is all that is left
        self.gateways[i].proc.wait(30)

    def restart(self, i: int) -> None:
        self.gateways[i] = self._start(i)
        self.gateways[i].wait_ready(120)

    def stop(self) -> None:
        for s in self.gateways + [self.reference]:
            s.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        for s in c.gateways + [c.reference]:
            s.wait_ready()
        workload = SmallControlPlaneWorkload(GPU_NODES, seed=3)
        end_ms = aligned_now_ms()
        start_ms = end_ms - (SCRAPES - 1) * INTERVAL_MS
        # series i goes to gateway i % 3, every one to the reference
        shards = build_requests(workload, start_ms, SCRAPES, INTERVAL_MS, GATEWAYS, 4000, 10)
        edges = edge_case_series(start_ms, end_ms)
        sends = [(c.reference, shards, edges)] + [(g, [shards[i]], edges[i::GATEWAYS])
                                                  for i, g in enumerate(c.gateways)]
        def load(server: Server, requests, series) -> None:
            res = asyncio.run(send_all(server.write_url, requests, 300.0, [metadata_request(workload)]))
            if res.requests_failed or res.requests_not_sent:
                raise RuntimeError(f"remote write to {server.write_url} failed: {res.summary()}")
            write_series(server.base_url, series)

        in_parallel([(load, *a) for a in sends])
        c.start_s, c.end_s = start_ms / 1000, end_ms / 1000
        c.series_of = [len(workload.series()[i::GATEWAYS]) + len(edges[i::GATEWAYS]) for i in range(GATEWAYS)]
        # a gateway's own metrics (for the metricsgw dashboard): scrapes of the reference, to it and to gateway 0
        provoke_discard_and_guard_rejection(c.reference.base_url)
        instance = c.reference.base_url.removeprefix("http://")
        scraped: set = set()
        for k in range(SELF_SCRAPES):
            t_ms = end_ms - (SELF_SCRAPES - 1 - k) * INTERVAL_MS
            api(c.reference.base_url, "/api/v1/query", {"query": "sum(rate(up[1m]))", "time": t_ms / 1000})
            got = scrape_into([c.reference.base_url, c.gateways[0].base_url], c.reference.base_url, "metricsgw",
                              instance, t_ms)
            scraped.update(tuple(map(tuple, labels)) for labels in got)
        c.series_of[0] += len(scraped)
        yield c
    finally:
        c.stop()


def _times(query: str, c: Cluster) -> str:
    return query.replace("<END>", f"{c.end_s:.3f}").replace("<START>", f"{c.start_s:.3f}")


def _check(c: Cluster, gateway: int, query: str, instants=INSTANTS, ranges=RANGES) -> None:
    """``query`` on one gateway equals the reference's answer, at every instant and range, with no warning."""
    query, url = _times(query, c), c.url(gateway)
    problems = []
    calls = [("/api/v1/query", {"query": query, "time": f"{c.end_s + dt:.3f}"}) for dt in instants]
    calls += [("/api/v1/query_range", {"query": query, "start": f"{c.end_s + a:.3f}", "end": f"{c.end_s + b:.3f}",
                                       "step": step}) for a, b, step in ranges]
    for path, params in calls:
        problems += compare_servers(url, c.reference.base_url, path, params,
                                    path.endswith("query") and queries.ordered(query),
                                    want_name="the reference", got_name=f"gateway {gateway}")
    status, body = api(url, calls[0][0], calls[0][1], method="POST")
    _, ref_body = api(c.reference.base_url, calls[0][0], calls[0][1], method="POST")
    extra = [w for w in body.get("warnings", []) if w not in ref_body.get("warnings", [])]  # PromQL's own are equal
    if extra:
        problems.append(f"{calls[0]}: warnings with every peer up: {extra}")
    assert not problems, "\n".join(problems[:6])


ALL_QUERIES = queries.QUERIES + [q for _, q in DASHBOARD_QUERIES]


@pytest.mark.parametrize("k", range(len(ALL_QUERIES)), ids=ALL_QUERIES)
def test_query_on_any_gateway_equals_the_reference(cluster, k):
    _check(cluster, k % GATEWAYS, ALL_QUERIES[k])


@pytest.fixture(scope="module")
def dashboard_values(cluster):
    def fetch(label: str, selector: str | None) -> list[str]:
        params = {"start": cluster.start_s, "end": cluster.end_s} | ({"match[]": selector} if selector else {})
        return api(cluster.reference.base_url, f"/api/v1/label/{label}/values", params)[1]["data"]

    return {name: (resolve_variables(d, fetch), resolve_variables(d, fetch, use_all=False))
            for name, d in DASHBOARDS.items()}


@pytest.mark.parametrize("k", range(len(DASHBOARD_TARGETS)), ids=[t.name for t in DASHBOARD_TARGETS])
def test_dashboard_panel_on_any_gateway_equals_the_reference(cluster, dashboard_values, k):
    target = DASHBOARD_TARGETS[k]
    for values in dashboard_values[target.dashboard]:
        _check(cluster, k % GATEWAYS, interpolate(target.expr, values), instants=[0, -7.5],
               ranges=[(-1800 + 3.3, 0, "37")])


def _metadata(url: str, path: str, params: dict, c: Cluster) -> tuple[int, dict]:
    return api(url, path, {"start": c.start_s - 60, "end": c.end_s + 60} | params)


def _as_set(data) -> set:
    return {tuple(sorted(x.items())) if isinstance(x, dict) else x for x in data}


@pytest.mark.parametrize("gateway", range(GATEWAYS))
def test_metadata_on_any_gateway_equals_the_reference(cluster, gateway):
    for path, params in METADATA_CALLS:
        _, want = _metadata(cluster.reference.base_url, path, params, cluster)
        status, got = _metadata(cluster.url(gateway), path, params, cluster)
        assert status == 200 and "warnings" not in got, (path, params, got)
        assert _as_set(got["data"]) == _as_set(want["data"]) and want["data"], (path, params)
        if path != "/api/v1/series":  # label listings are sorted
            assert got["data"] == want["data"]


def _peer_requests(url: str, peer: str, result: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    # a multi-process gateway labels each sample by process first (metricsgw/procs/exposition.py)
    line = re.compile(rf'^metricsgw_peer_requests_total\{{(process="[^"]*",)?peer="{re.escape(peer)}",result="{result}"\}} (\S+)$')
    return sum(float(m.group(2)) for m in map(line.match, text.splitlines()) if m)


def _count_all(url: str, c: Cluster, **params) -> tuple[int, dict]:
    # every series has samples in the last 50 minutes (an instant count would miss those gone stale)
    status, body = api(url, "/api/v1/query", {"query": 'count(last_over_time({__name__=~".+"}[50m]))',
                                              "time": c.end_s, **params}, method="POST")
    assert status == 200, body
    return int(body["data"]["result"][0]["value"][1]), body


def test_kill_9_fails_calls_unless_partial_answers_are_asked_for_and_after_restart_they_are_complete(cluster):
    """A dead peer's recent samples are missing: by default every call says so with 503 (never a short 200);
    asked for a partial answer, the call answers without exactly the dead one's series, with a warning."""
    c, dead = cluster, GATEWAYS - 1
    total, _ = _count_all(c.reference.base_url, c)
    assert total == sum(c.series_of)
    c.kill(dead)
    partial = {"partial_response": "true"}
    try:
        for live in range(GATEWAYS - 1):
            status, body = api(c.url(live), "/api/v1/query", {"query": "count(up)", "time": c.end_s}, method="POST")
            assert (status, body["errorType"]) == (503, "unavailable") and c.url(dead) in body["error"], body
            for path in ("/api/v1/series", "/api/v1/labels", "/api/v1/label/Hostname/values"):
                status, got = _metadata(c.url(live), path, {"match[]": '{__name__=~".+"}'}, c)
                assert (status, got["errorType"]) == (503, "unavailable") and c.url(dead) in got["error"], (path, got)
            count, body = _count_all(c.url(live), c, **partial)
            assert count == total - c.series_of[dead]  # exactly the dead one's series are missing
            assert len(body["warnings"]) == 1 and c.url(dead) in body["warnings"][0], body
            status, series = _metadata(c.url(live), "/api/v1/series", {"match[]": '{__name__=~".+"}', **partial}, c)
            assert status == 200 and len(series["data"]) == total - c.series_of[dead]
            assert c.url(dead) in series["warnings"][0]
            for path in ("/api/v1/labels", "/api/v1/label/Hostname/values"):
                status, got = _metadata(c.url(live), path, partial, c)
                assert status == 200 and c.url(dead) in got["warnings"][0], (path, got)
            assert _peer_requests(c.url(live), c.url(dead), "down") > 0
    finally:
        c.restart(dead)
    for live in range(GATEWAYS):
        count, body = _count_all(c.url(live), c)
        assert count == total and "warnings" not in body, body
    _check(c, 0, "sum by (Hostname) (rate(DCGM_FI_DEV_PCIE_TX_THROUGHPUT[1m]))")
    _check(c, dead, 'count by (__name__) ({__name__=~".+"})')
