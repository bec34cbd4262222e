"""A real Prometheus scrapes an exporter and remote-writes to metricsgw; both answer the same."""

from __future__ import annotations

import time

import pytest

from testkit.procs import start_metricsgw
from tests.e2e.client import api
from tests.e2e.compare import diff
from tests.e2e.prometheus import Exporter, start_scraping_prometheus

SCRAPE_SECONDS = 12

INSTANT = [
    "up",
    "DCGM_FI_DEV_GPU_UTIL",
    'DCGM_FI_DEV_GPU_TEMP{gpu="3"}',
    'DCGM_FI_DEV_FB_USED{gpu=~"[0-3]", device!="nvidia1"}',
    '{__name__=~"DCGM_FI_DEV_(GPU|MEM).*", gpu="0"}',
    "node_cpu_seconds_total",
    "scrape_samples_scraped",
]
RANGE_SELECTORS = ["up[10s]", 'DCGM_FI_DEV_POWER_USAGE{gpu="1"}[8s]', "node_cpu_seconds_total[5s]"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    work = tmp_path_factory.mktemp("sender")
    gw = start_metricsgw(work / "gw")
    gw.wait_ready()
    exporter = Exporter(nodes=2)
    prom = start_scraping_prometheus(work / "prom", exporter.address, gw.write_url)
    try:
        prom.wait_ready()
        time.sleep(SCRAPE_SECONDS)
        closed_at = time.time()
        exporter.close()  # the target goes down: Prometheus writes staleness markers, up becomes 0
        time.sleep(3)
        _wait_caught_up(gw.base_url, prom.base_url)
        yield gw, prom, closed_at
    finally:
        prom.stop()
        gw.stop()


def _wait_caught_up(gw_url: str, prom_url: str, timeout_s: float = 30.0) -> None:
    """Remote write lags scraping by a batch: wait until metricsgw has what Prometheus has."""
    deadline = time.monotonic() + timeout_s
    q = {"query": "count_over_time(up[1m])", "time": time.time()}
    while time.monotonic() < deadline:
        _, want = api(prom_url, "/api/v1/query", q)
        _, got = api(gw_url, "/api/v1/query", q)
        if got.get("status") == "success" and not diff(got["data"], want["data"]):
            return
        time.sleep(0.5)


@pytest.mark.parametrize("query", INSTANT + RANGE_SELECTORS)
def test_instant_answers_equal_prometheus(pair, query):
    gw, prom, closed = pair
    # while scraping, at the end, after the staleness markers, and past the 5m lookback
    for t in (closed - 4.5, closed - 1.2, closed + 2.5, closed + 400.0):
        params = {"query": query, "time": f"{t:.3f}"}
        s1, want = api(prom.base_url, "/api/v1/query", params)
        s2, got = api(gw.base_url, "/api/v1/query", params)
        assert s1 == 200 and s2 == 200, (want, got)
        assert got["status"] == "success"
        if t < closed:
            assert want["data"]["result"], f"Prometheus has no data for {query} @ {t}: the test is not testing"
        problems = diff(got["data"], want["data"])
        assert not problems, f"{query} @ {t}: {problems}"


@pytest.mark.parametrize("query", INSTANT)
def test_range_answers_equal_prometheus(pair, query):
    gw, prom, closed = pair
    params = {"query": query, "start": f"{closed - SCRAPE_SECONDS:.3f}", "end": f"{closed + 30:.3f}", "step": "0.7"}
    s1, want = api(prom.base_url, "/api/v1/query_range", params, method="POST")
    s2, got = api(gw.base_url, "/api/v1/query_range", params, method="POST")
    assert s1 == 200 and s2 == 200, (want, got)
    assert want["data"]["result"], f"Prometheus has no data for {query}: the test is not testing"
    problems = diff(got["data"], want["data"])
    assert not problems, f"{query}: {problems}"


def test_metadata_arrives(pair):
    gw, prom, _ = pair
    _, want = api(prom.base_url, "/api/v1/metadata", {"metric": "DCGM_FI_DEV_GPU_UTIL"})
    _, got = api(gw.base_url, "/api/v1/metadata", {"metric": "DCGM_FI_DEV_GPU_UTIL"})
    assert got["data"].get("DCGM_FI_DEV_GPU_UTIL"), got
    assert got["data"]["DCGM_FI_DEV_GPU_UTIL"][0]["type"] == want["data"]["DCGM_FI_DEV_GPU_UTIL"][0]["type"]
