"""/api/v1/metadata as Grafana's editor loads it (language_provider.ts loadMetricsMetadata, 10.x-12.x: no
parameters; the metric picker's help text), in the set-up operators run: a real Prometheus scrapes an exporter
and remote-writes to metricsgw, metadata included (``metadata_config``). Prometheus answers from its targets,
metricsgw from what remote write brought; Grafana must get the same answer from both."""

from __future__ import annotations

import time

import pytest

from testkit.procs import start_metricsgw
from tests.e2e.prometheus import Exporter, start_scraping_prometheus
from tests.grafana.catalogue import Call
from tests.grafana.exchange import differences, send

SOURCE = "language_provider.ts loadMetricsMetadata (10.x-12.x)"
METADATA = Call("metadata", "editor start-up", SOURCE, "/api/v1/metadata", ())
ONE_METRIC = Call("metadata of a metric", "metric picker help", "Prometheus API /metadata?metric=", "/api/v1/metadata",
                  (("metric", "DCGM_FI_DEV_GPU_UTIL"),))
WAIT_S = 90.0  # generous: scraping, then remote write's metadata interval (2 s here), on a busy machine


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    work = tmp_path_factory.mktemp("grafana-metadata")
    gw = start_metricsgw(work / "gw")
    exporter = Exporter(nodes=1)
    prom = None
    try:
        gw.wait_ready()
        prom = start_scraping_prometheus(work / "prom", exporter.address, gw.write_url)
        prom.wait_ready()
        yield gw.base_url, prom.base_url
    finally:
        if prom is not None:
            prom.stop()
        exporter.close()
        gw.stop()


def _settled(gw_url: str, prom_url: str, call: Call) -> list[str]:
    """Wait until Prometheus has metadata and metricsgw has caught up with it; the differences left then."""
    deadline = time.monotonic() + WAIT_S
    while True:
        want, got = send(prom_url, call, "GET"), send(gw_url, call, "GET")
        problems = differences(call, got, want)
        if (want.body["data"] and not problems) or time.monotonic() > deadline:
            assert want.body["data"], "Prometheus scraped no metadata"
            return problems
        time.sleep(0.5)


@pytest.mark.parametrize("call", [METADATA, ONE_METRIC], ids=lambda c: c.name)
def test_metadata_answered_as_prometheus(scraped, call):
    gw_url, prom_url = scraped
    assert not _settled(gw_url, prom_url, call)
    for method in ("POST", "GET"):  # /metadata is GET-only in Grafana's client either way
        problems = differences(call, send(gw_url, call, method), send(prom_url, call, method))
        assert not problems, f"{call.name} via {method}:\n" + "\n".join(problems)
    got = send(gw_url, call, "GET").body["data"]
    assert got["DCGM_FI_DEV_GPU_UTIL"][0]["type"] == "gauge" and got["DCGM_FI_DEV_GPU_UTIL"][0]["help"]
    assert len(got) >= (20 if call is METADATA else 1)  # the workload's families, not just one
