"""docs/cluster.md's three-gateway Prometheus configuration, checked by promtool and run by a real Prometheus 2.42.

Prometheus scrapes an exporter (the bench workload, two nodes) and remote-writes through docs/cluster.md's
three hashmod-sharded entries to three gateways (each with --cluster.peers of the other two), and whole
to a reference gateway. Then: every series is on exactly one gateway (what each holds itself, read with
?scope=head), none carries the hash label, together they hold what the reference holds, and every query
of tests/e2e/queries.py asked of any gateway equals the reference's answer.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import yaml

from testkit.procs import REPO, free_port, start_metricsgw
from tests.e2e import queries
from tests.e2e.client import api
from tests.e2e.compare import compare_servers
from tests.e2e.prometheus import Exporter, start_prometheus_sender
from tests.remote.read_client import build_request, decode_samples, post

PROMTOOL = "/usr/bin/promtool"
GATEWAYS = 3
HEAD_ONLY = ["--storage.flush-interval=24h", "--storage.flush-max-samples=100000000"]
SCRAPES = 8


def documented_remote_write() -> list[dict]:
    """The remote_write entries of docs/cluster.md's "prometheus.yml (three gateways)" block."""
    text = (REPO / "docs" / "cluster.md").read_text()
    block = re.search(r"```yaml\n(# prometheus\.yml \(three gateways\).*?)```", text, re.S)
    assert block, "docs/cluster.md lost its three-gateway Prometheus configuration"
    return yaml.safe_load(block.group(1))["remote_write"]


def test_documented_configuration_passes_promtool(tmp_path):
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}, "scrape_configs": [],
                                      "remote_write": documented_remote_write()}))
    proc = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entries = documented_remote_write()
    assert [e["write_relabel_configs"][1]["regex"] for e in entries] == ["0", "1", "2"]
    assert {e["write_relabel_configs"][0]["modulus"] for e in entries} == {GATEWAYS}


def _wait(what: str, probe, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"waited {timeout_s}s for {what}")


def _value(url: str, query: str) -> float | None:
    status, body = api(url, "/api/v1/query", {"query": query, "time": time.time()})
    result = body.get("data", {}).get("result") if status == 200 else None
    return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    work = tmp_path_factory.mktemp("sharded")
    ports = [free_port() for _ in range(GATEWAYS)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    gateways = [start_metricsgw(work / f"gw{i}", port=ports[i],
                                extra=HEAD_ONLY + [f"--cluster.peers={u}" for u in urls if u != urls[i]])
                for i in range(GATEWAYS)]
    reference = start_metricsgw(work / "reference", extra=HEAD_ONLY)
    servers = gateways + [reference]
    exporter = Exporter(nodes=2)
    prom = None
    try:
        for s in servers:
            s.wait_ready()
        shards = [{**entry, "url": gw.write_url} for entry, gw in zip(documented_remote_write(), gateways)]
        jobs = [{"job_name": "exporter", "static_configs": [{"targets": [exporter.address]}]}]
        prom = start_prometheus_sender(work / "prom", jobs, reference.write_url, more_remote_write=shards)
        prom.wait_ready()
        _wait(f"{SCRAPES} scrapes at the reference",
              lambda: (_value(reference.base_url, "max(count_over_time(up[1h]))") or 0) >= SCRAPES)
        prom.stop()  # SIGTERM: its queues are sent before it exits; the data stops changing
        total = 'sum(count_over_time({__name__=~".+"}[1h]))'
        want = _value(reference.base_url, total)
        for u in urls:
            _wait(f"{u} to answer for every sample", lambda u=u: _value(u, total) == want)
        yield urls, reference.base_url
    finally:
        exporter.close()
        for s in servers + ([prom] if prom else []):
            s.stop()


def _own_series(url: str) -> set:
    """The series a gateway holds itself (remote read of its head: no peer is asked)."""
    body = build_request([{"matchers": [("__name__", "=~", ".+")], "start": 0, "end": int(time.time() * 1000) + 10**7}])
    status, _, raw = post(url + "/api/v1/read?scope=head", body)
    assert status == 200
    return set(decode_samples(raw)[0])


def test_every_series_is_on_exactly_one_gateway(sharded):
    urls, reference = sharded
    own = [_own_series(u) for u in urls]
    assert all(own), [len(s) for s in own]  # the hash spreads the series over all three
    assert sum(len(s) for s in own) == len(set().union(*own))  # no series on two gateways
    assert set().union(*own) == _own_series(reference)
    assert not any(name == "__tmp_hash" for s in own for labels in s for name, _ in labels)


@pytest.mark.parametrize("k", range(len(queries.QUERIES)), ids=queries.QUERIES)
def test_query_on_any_gateway_equals_the_reference(sharded, k):
    urls, reference = sharded
    query = queries.QUERIES[k]
    _, body = api(reference, "/api/v1/query", {"query": "max(timestamp(up))", "time": time.time()})
    end = float(body["data"]["result"][0]["value"][1])
    query = query.replace("<END>", f"{end:.3f}").replace("<START>", f"{end - SCRAPES:.3f}")
    problems = []
    for params in ({"query": query, "time": f"{end:.3f}"}, {"query": query, "time": f"{end - 2.5:.3f}"}):
        problems += compare_servers(urls[k % GATEWAYS], reference, "/api/v1/query", params, queries.ordered(query),
                                    want_name="the reference", got_name=f"gateway {k % GATEWAYS}")
    params = {"query": query, "start": f"{end - 20:.3f}", "end": f"{end + 30:.3f}", "step": "1.3"}
    problems += compare_servers(urls[k % GATEWAYS], reference, "/api/v1/query_range", params, False,
                                want_name="the reference", got_name=f"gateway {k % GATEWAYS}")
    assert not problems, "\n".join(problems[:6])
