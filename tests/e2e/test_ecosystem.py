"""metricsgw inside the real ecosystem, every part a Debian binary, nothing mocked.

Prometheus 2.42 scrapes prometheus-node-exporter and a DCGM/iptables/apiserver exposition served
here, and remote-writes to metricsgw, which runs with the relabel rules `make serve` passes;
vmagent scrapes the same targets (its series carry sender="vmagent") as a second sender; vmalert
evaluates a recording and an alerting rule against metricsgw, writes the recording back by remote
write and sends the alert to Alertmanager, and evaluates the shipped rules/alerts/ files as well;
promtool queries metricsgw. Each test waits for its
condition with bounded polling; none depends on how fast the machine is.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from metricsgw.rules.loader import load_rule_files
from testkit.procs import Server, free_port, start_metricsgw
from tests.e2e.client import api
from tests.e2e.ecosystem import (PROMTOOL, metric_sum, own_metrics, start_alertmanager, start_node_exporter,
                                 start_vmagent, start_vmalert, wait_for)
from tests.e2e.prometheus import Exporter, start_prometheus_sender
from tests.shipped import alert_rule_files, make_serve_rule_files

WORKLOAD_FAMILIES = r"DCGM_|iptables_|apiserver_|etcd_"  # node_* and up come from the real node-exporter
WORKLOAD_METRICS = '{__name__=~"DCGM_.+|iptables_.+|apiserver_.+|etcd_.+"}'
# Series the shipped rules drop that the bench workload does not emit (same label shapes).
EXTRA_SERIES = """\
DCGM_FI_PROF_PIPE_FP64_ACTIVE{gpu="0",UUID="GPU-e2e",device="nvidia0",Hostname="gpu-node-00000",job="dcgm-exporter",instance="10.20.0.1:9400"} 0.25
DCGM_FI_DEV_ENC_UTIL{gpu="0",UUID="GPU-e2e",device="nvidia0",Hostname="gpu-node-00000",job="dcgm-exporter",instance="10.20.0.1:9400"} 0
iptables_rule_bytes_total{table="nat",chain="KUBE-SVC-TCOU7JCQXEZGVUNU",rule="-j KUBE-SEP-X",comment="default/kubernetes:https",job="iptables-exporter",instance="10.20.0.1:9455"} 12345
apiserver_request_sli_duration_seconds_bucket{verb="GET",resource="pods",scope="resource",le="1",job="apiserver",instance="10.19.0.10:6443"} 7
apiserver_watch_events_sizes_bucket{group="",kind="Pod",version="v1",le="1024",job="apiserver",instance="10.19.0.10:6443"} 3
"""
DROPPED_BY_SHIPPED_RULES = ["DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_DEV_ENC_UTIL",
                            "apiserver_request_sli_duration_seconds_bucket", "apiserver_watch_events_sizes_bucket"]

RULER_RULES = """\
groups:
  - name: e2e-node
    interval: 1s
    rules:
      - record: instance:node_cpu_seconds:rate1m
        expr: sum by (instance) (rate(node_cpu_seconds_total{job="node", sender=""}[1m]))
      - alert: E2ENodeCpuSeen
        expr: instance:node_cpu_seconds:rate1m > 0
        labels:
          severity: test
        annotations:
          summary: "node {{ $labels.instance }} spends {{ $value }} CPU-seconds per second"
"""
RECORDING, ALERT = "instance:node_cpu_seconds:rate1m", "E2ENodeCpuSeen"


@dataclass
class Stack:
    gw: Server
    prom: Server
    vmagent: Server
    vmalert: Server
    alertmanager: Server
    node: Server
    rule_files: list[Path]


def scrape_jobs(node: Server, exporter: Exporter, interval: str) -> list[dict]:
    return [
        {"job_name": "node", "scrape_interval": interval,
         "static_configs": [{"targets": [node.base_url.removeprefix("http://")]}]},
        {"job_name": "workload", "scrape_interval": interval, "honor_labels": True,  # keep the exporters' job/instance
         "static_configs": [{"targets": [exporter.address]}]},
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("ecosystem")
    rule_files = make_serve_rule_files()
    exporter = Exporter(nodes=1, node_range=range(0, 2), families=WORKLOAD_FAMILIES, extra=EXTRA_SERIES)
    servers: list[Server] = []

    def started(server: Server) -> Server:
        servers.append(server)
        return server

    try:
        textfile = work / "textfile"
        textfile.mkdir()
        (textfile / "e2e.prom").write_text('e2e_textfile_marker{source="test"} 42\n')
        node = started(start_node_exporter(work / "node", textfile))
        alertmanager = started(start_alertmanager(work / "alertmanager"))
        vmalert_port = free_port()
        gw = started(start_metricsgw(work / "gw", extra=[*(f"--rules.file={f}" for f in rule_files),
                                                           f"--rules.ruler-url=http://127.0.0.1:{vmalert_port}",
                                                           "--query.promql-compat=2"]))  # compared with 2.42
        for server in servers:
            server.wait_ready()
        # One shard: Prometheus then sends in WAL order, so a sample that arrived means all before it did.
        prom = started(start_prometheus_sender(work / "prom", scrape_jobs(node, exporter, "1s"), gw.write_url,
                                               queue={"min_shards": 1, "max_shards": 1}))
        vmagent_scrape = yaml.safe_dump({"scrape_configs": scrape_jobs(node, exporter, "2s")})
        vmagent = started(start_vmagent(work / "vmagent", vmagent_scrape, gw.write_url,
                                        extra=["-remoteWrite.label=sender=vmagent"]))
        (work / "ruler.yml").write_text(RULER_RULES)
        vmalert = started(start_vmalert(work / "vmalert", [work / "ruler.yml", *alert_rule_files()], gw.base_url,
                                        gw.base_url, alertmanager.base_url, port=vmalert_port))
        for server in (prom, vmagent, vmalert):
            server.wait_ready()
        yield Stack(gw, prom, vmagent, vmalert, alertmanager, node, rule_files)
    finally:
        for server in reversed(servers):
            server.stop()
        exporter.close()


def query(base_url: str, expr: str, t: float | None = None) -> list[dict]:
    params = {"query": expr} | ({"time": f"{t:.3f}"} if t is not None else {})
    status, body = api(base_url, "/api/v1/query", params)
    assert status == 200 and body["status"] == "success", body
    return body["data"]["result"]


def by_labels(result: list[dict]) -> dict[tuple, object]:
    return {tuple(sorted(r["metric"].items())): r.get("value") for r in result}


def series(base_url: str, match: str, start: float, end: float) -> set[tuple]:
    status, body = api(base_url, "/api/v1/series", {"match[]": match, "start": start, "end": end})
    assert status == 200, body
    return {tuple(sorted(s.items())) for s in body["data"]}


def scrape_time_in_both(stack: Stack) -> float:
    """The time of a node scrape Prometheus holds and metricsgw has received completely: Prometheus
    sends a scrape's samples before its `up` sample, in order on one shard, so once metricsgw has
    that `up` it has the whole scrape."""
    up = wait_for("a node scrape in Prometheus", lambda: query(stack.prom.base_url, 'timestamp(up{job="node"})'))
    t = float(up[0]["value"][1])
    wait_for(f"metricsgw to receive the node scrape at {t}", lambda: query(
        stack.gw.base_url, f'timestamp(up{{job="node", sender=""}}) >= {t:.3f}'), timeout_s=30)
    return t


# ------------------------------------------------------------------ data: what arrives, and how

def test_node_exporter_series_and_values_equal_prometheus(stack):
    """Same scrape, two stores: at a common timestamp every node-exporter series (and the scrape's
    own up/scrape_* series) has the same labels and the same value in metricsgw as in Prometheus."""
    t = scrape_time_in_both(stack)
    want = by_labels(query(stack.prom.base_url, '{job="node"}', t))
    got = by_labels(query(stack.gw.base_url, '{job="node", sender=""}', t))
    assert len(want) > 200, f"node-exporter exposed only {len(want)} series: the test is not testing"
    assert ((("__name__", "e2e_textfile_marker"), ("instance", stack.node.base_url.removeprefix("http://")),
             ("job", "node"), ("source", "test")) in got), "the private textfile directory was not read"
    assert set(got) == set(want), (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5])
    differ = [(k, got[k], want[k]) for k in want if got[k] != want[k]]
    assert not differ, differ[:5]


def test_shipped_relabel_rules_applied(stack):
    """metricsgw holds exactly the relabelled image of what Prometheus scraped: dropped series absent,
    relabelled ones changed, the rest unchanged (rules applied as `make serve` passes them)."""
    rules = load_rule_files([str(f) for f in stack.rule_files])
    # Two finished scrapes: a series read while the first one is being appended could be missing.
    wait_for("two workload scrapes in Prometheus",
             lambda: query(stack.prom.base_url, 'count_over_time(up{job="workload"}[1m]) >= 2'))
    end = time.time() + 60
    scraped = series(stack.prom.base_url, WORKLOAD_METRICS, 0, end)
    expected = {tuple(sorted(out)) for out in (rules.apply(s) for s in scraped) if out is not None}

    def arrived():
        got = series(stack.gw.base_url, WORKLOAD_METRICS.replace("}", ', sender=""}'), 0, end)
        return got if got == expected else None

    try:
        wait_for("metricsgw to hold the relabelled workload", arrived, timeout_s=30)
    except TimeoutError:
        got = series(stack.gw.base_url, WORKLOAD_METRICS.replace("}", ', sender=""}'), 0, end)
        pytest.fail(f"missing: {sorted(expected - got)[:3]}, unexpected: {sorted(got - expected)[:3]}")
    names = {dict(s)["__name__"] for s in scraped}
    kept_names = {dict(s)["__name__"] for s in expected}
    for name in DROPPED_BY_SHIPPED_RULES:
        assert name in names and name not in kept_names, name
    assert len(expected) < len(scraped), "the rules dropped nothing"
    assert all("comment" not in dict(s) for s in expected if dict(s)["__name__"].startswith("iptables_"))
    assert not any(dict(s).get("chain", "").startswith("KUBE-SVC-") for s in expected)
    assert all("device" not in dict(s) for s in expected if dict(s)["__name__"].startswith("DCGM_FI_"))


def test_second_sender_vmagent_arrives(stack):
    wait_for("vmagent's node-exporter series in metricsgw",
             lambda: query(stack.gw.base_url, 'up{job="node", sender="vmagent"} == 1'), timeout_s=30)
    wait_for("vmagent's workload series in metricsgw",
             lambda: query(stack.gw.base_url, 'count(DCGM_FI_DEV_GPU_TEMP{sender="vmagent"}) == 8'), timeout_s=30)
    assert not query(stack.gw.base_url, 'DCGM_FI_PROF_PIPE_FP64_ACTIVE{sender="vmagent"}')  # its drops too


# ------------------------------------------------------------------ rules: vmalert, Alertmanager, /api/v1/rules

def test_vmalert_recording_written_back_and_alert_reaches_alertmanager(stack):
    recorded = wait_for("the recording rule's series in metricsgw", lambda: query(stack.gw.base_url, RECORDING))
    assert all(float(r["value"][1]) > 0 for r in recorded), recorded

    def alert_in_alertmanager():
        status, alerts = api(stack.alertmanager.base_url, "/api/v2/alerts")
        return [a for a in alerts if a["labels"].get("alertname") == ALERT] if status == 200 else None

    alerts = wait_for("the alert in Alertmanager", alert_in_alertmanager)
    assert alerts[0]["labels"]["severity"] == "test" and alerts[0]["status"]["state"] == "active"
    assert "CPU-seconds per second" in alerts[0]["annotations"]["summary"]
    metrics = own_metrics(stack.vmalert.base_url)
    assert metric_sum(metrics, "vmalert_alerts_firing", alertname=ALERT) >= 1
    assert metric_sum(metrics, "vmalert_execution_errors_total") == 0
    assert metric_sum(metrics, "vmalert_alerts_send_errors_total") == 0


def test_rules_and_alerts_apis_show_vmalert(stack):
    wait_for("vmalert's firing alert written to metricsgw",
             lambda: query(stack.gw.base_url, f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}'))
    status, body = api(stack.gw.base_url, "/api/v1/rules")
    assert status == 200, body
    (group,) = [g for g in body["data"]["groups"] if g["name"] == "e2e-node"]
    assert group["interval"] == 1 and group["file"].endswith("ruler.yml")
    recording, alerting = group["rules"]
    assert (recording["type"], recording["name"], recording["health"]) == ("recording", RECORDING, "ok")
    assert (alerting["type"], alerting["name"], alerting["state"], alerting["health"]) == \
        ("alerting", ALERT, "firing", "ok")
    assert alerting["alerts"] and alerting["alerts"][0]["labels"]["alertname"] == ALERT
    status, body = api(stack.gw.base_url, "/api/v1/rules", {"type": "record"})
    assert {r["type"] for g in body["data"]["groups"] for r in g["rules"]} == {"recording"}
    status, body = api(stack.gw.base_url, "/api/v1/alerts")
    assert status == 200 and [a["state"] for a in body["data"]["alerts"] if a["labels"]["alertname"] == ALERT] == \
        ["firing"], body


def test_shipped_alert_and_recording_rules_evaluate_on_metricsgw(stack):
    """vmalert evaluates every rule of rules/alerts/ against metricsgw without an error (each one at least
    once: lastEvaluation set), as metricsgw's /api/v1/rules reports it."""
    shipped = {str(f) for f in alert_rule_files()}

    def evaluated():
        _, body = api(stack.gw.base_url, "/api/v1/rules")
        rules = [r for g in body["data"]["groups"] if g["file"] in shipped for r in g["rules"]]
        done = rules and all(not r["lastEvaluation"].startswith("0001-") for r in rules)
        return rules if done else None

    rules = wait_for("every shipped rule evaluated once", evaluated)
    assert len(rules) >= 10, f"only {len(rules)} shipped rules: the test is not testing"
    failed = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not failed, failed


# ------------------------------------------------------------------ promtool against metricsgw

def promtool(*args: str) -> str:
    proc = subprocess.run([PROMTOOL, "query", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def test_promtool_queries_metricsgw_as_it_queries_prometheus(stack):
    t = scrape_time_in_both(stack)
    instant = ["instant", f"--time={t:.3f}"]
    assert promtool(*instant, stack.gw.base_url, 'node_load1{sender=""}') == \
        promtool(*instant, stack.prom.base_url, "node_load1")
    window = ["range", f"--start={t - 5:.3f}", f"--end={t:.3f}", "--step=1s"]
    got = promtool(*window, stack.gw.base_url, 'sum(rate(node_cpu_seconds_total{job="node", sender=""}[3s]))')
    assert got == promtool(*window, stack.prom.base_url, 'sum(rate(node_cpu_seconds_total{job="node"}[3s]))')
    assert "=>" in got


# ------------------------------------------------------------------ last: nobody lost a sample on the way

def test_no_sender_counts_a_failed_or_dropped_sample(stack):
    """Run last, over all the traffic above: configured drops were answered 2xx (counted by metricsgw
    as relabel_drop, the only reason), so no sender failed, retried into loss or dropped a sample."""
    gw = own_metrics(stack.gw.base_url)
    assert metric_sum(gw, "metricsgw_discarded_samples_total", reason="relabel_drop") > 0
    assert metric_sum(gw, "metricsgw_discarded_samples_total", reason="(?!relabel_drop).*") == 0
    prom = own_metrics(stack.prom.base_url)
    assert metric_sum(prom, "prometheus_remote_storage_samples_total") > 10_000
    for name in ("prometheus_remote_storage_samples_failed_total", "prometheus_remote_storage_samples_dropped_total",
                 "prometheus_remote_storage_metadata_failed_total"):
        assert metric_sum(prom, name) == 0, name
    vm = own_metrics(stack.vmagent.base_url)
    assert metric_sum(vm, "vmagent_remotewrite_requests_total", status_code="2..") > 0
    assert metric_sum(vm, "vmagent_remotewrite_requests_total", status_code="(?!2..).*") == 0
    for name in ("vmagent_remotewrite_packets_dropped_total", "vmagent_remotewrite_retries_count_total",
                 "vmagent_remotewrite_errors_total", "vm_promscrape_scrapes_failed_total"):
        assert metric_sum(vm, name) == 0, name
    alert = own_metrics(stack.vmalert.base_url)
    assert metric_sum(alert, "vmalert_remotewrite_total") > 0
    for name in ("vmalert_remotewrite_errors_total", "vmalert_remotewrite_dropped_rows_total",
                 "vmalert_execution_errors_total"):
        assert metric_sum(alert, name) == 0, name
