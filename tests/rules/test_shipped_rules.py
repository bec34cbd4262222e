"""The shipped rule files (rules/relabel/*.yml) do what their comments say, on the bench workload's series.

testkit/workload.py emits realistic dcgm-exporter, iptables-exporter, node-exporter and
kube-apiserver label sets; fields it does not emit (e.g. DCGM_FI_PROF_PIPE_FP64_ACTIVE,
apiserver_watch_events_sizes_bucket, kube-proxy KUBE-SEP chains) are checked on label sets
built here in the same shape.
"""

from __future__ import annotations

import io
import pathlib
import shutil
import subprocess
from collections import Counter

import pytest
import yaml

from metricsgw.model import canonical, metric_name
from metricsgw.rules import check
from metricsgw.rules.loader import load_rule_file, load_rule_files
from testkit.workload import Workload

RULES = pathlib.Path(__file__).resolve().parents[2] / "rules" / "relabel"
FILES = sorted(str(p) for p in RULES.glob("*.yml"))


@pytest.fixture(scope="module")
def relabelled():
    w = Workload(2, seed=1)
    rules = load_rule_files(FILES)
    return [(labels, rules.apply(labels)) for labels in w.series()]


def by_name(pairs, name):
    return [(i, o) for i, o in pairs if metric_name(i) == name]


def test_all_shipped_files_are_checked_and_present():
    assert {pathlib.Path(f).name for f in FILES} >= {"dcgm.yml", "iptables.yml", "kube-apiserver.yml"}
    assert check.main(FILES, io.StringIO(), io.StringIO()) == 0


def test_every_rule_has_a_comment_saying_why():
    for path in FILES:
        lines = pathlib.Path(path).read_text().splitlines()
        items = [i for i, line in enumerate(lines) if line.startswith("- ")]
        assert len(items) == len(load_rule_file(path))
        for i in items:
            above = lines[i - 1] if i else ""
            assert above.startswith("# ") and len(above) > 20, f"{path}:{i + 1}: rule without a why-comment"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_real_prometheus_accepts_the_shipped_rules(tmp_path):
    for path in FILES:
        cfg = {"scrape_configs": [{"job_name": "x", "static_configs": [{"targets": ["a:1"]}],
                                   "metric_relabel_configs": yaml.safe_load(pathlib.Path(path).read_text())}]}
        (tmp_path / "p.yml").write_text(yaml.safe_dump(cfg))
        proc = subprocess.run(["promtool", "check", "config", "--syntax-only", str(tmp_path / "p.yml")],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, (path, proc.stdout, proc.stderr)


def test_no_two_series_collapse_into_one(relabelled):
    kept = [o for _, o in relabelled if o is not None]
    dupes = [k for k, n in Counter(kept).items() if n > 1]
    assert not dupes


def test_metrics_nobody_drops_pass_unchanged(relabelled):
    for name in ("node_cpu_seconds_total", "node_network_receive_bytes_total", "node_filesystem_avail_bytes", "up",
                 "apiserver_request_total", "apiserver_request_duration_seconds_count",
                 "etcd_request_duration_seconds_sum", "apiserver_current_inflight_requests"):
        pairs = by_name(relabelled, name)
        assert pairs and all(i == o for i, o in pairs), name
    # node-exporter's own device label survives (the DCGM device rule is scoped to DCGM_FI_*)
    assert all(dict(o).get("device") for _, o in by_name(relabelled, "node_network_receive_bytes_total"))


# --- dcgm.yml ---------------------------------------------------------------------------------------
def test_dcgm_churny_labels_removed_identity_labels_kept(relabelled):
    dcgm = [(i, o) for i, o in relabelled if metric_name(i).startswith("DCGM_FI_")]
    assert len(dcgm) == 2 * 8 * 20 and all(o is not None for _, o in dcgm)  # no workload DCGM field is dropped
    for i, o in dcgm:
        out, inp = dict(o), dict(i)
        assert "device" not in out and "__tmp_driver_version" not in out
        # Hostname stays: the GPU dashboard and alerts are keyed on it (see the comment in dcgm.yml)
        for keep in ("Hostname", "gpu", "UUID", "modelName", "instance", "job", "namespace", "pod", "container"):
            assert out.get(keep) == inp.get(keep)
        if metric_name(i) == "DCGM_FI_DEV_GPU_TEMP":
            assert out["DCGM_FI_DRIVER_VERSION"] == inp["DCGM_FI_DRIVER_VERSION"]
        else:
            assert "DCGM_FI_DRIVER_VERSION" not in out


def dcgm_series(name, **extra):
    return canonical({"__name__": name, "gpu": "3", "UUID": "GPU-8a1c", "device": "nvidia3", "Hostname": "dcgm-x7k2p",
                      "modelName": "NVIDIA H100 80GB HBM3", "DCGM_FI_DRIVER_VERSION": "535.129.03",
                      "namespace": "research", "pod": "train-0", "container": "main", **extra}.items())


@pytest.mark.parametrize("name", ["DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
                                  "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
                                  "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
                                  "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS"])
def test_dcgm_uncharted_fields_dropped(name):
    assert load_rule_file(str(RULES / "dcgm.yml")).apply(dcgm_series(name)) is None


def test_dcgm_charted_fields_and_pod_uid():
    rules = load_rule_file(str(RULES / "dcgm.yml"))
    for name in ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                 "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"):
        out = rules.apply(dcgm_series(name, pod_uid="0f7c9a4e-1b"))
        assert out is not None and "pod_uid" not in dict(out) and dict(out)["pod"] == "train-0"


# --- iptables.yml -------------------------------------------------------------------------------------
def test_iptables_comment_removed_pod_packets_dropped_bytes_kept(relabelled):
    ipt = [(i, o) for i, o in relabelled if metric_name(i).startswith("iptables_")]
    assert ipt
    for i, o in ipt:
        chain = dict(i)["chain"]
        if metric_name(i) == "iptables_rule_packets_total" and chain.startswith("KUBE-POD-"):
            assert o is None
        else:
            assert o is not None and "comment" not in dict(o)
            assert {k: v for k, v in i if k != "comment"} == dict(o)
    assert any(o and dict(o)["chain"] == "KUBE-POD-EGRESS" for _, o in ipt)  # bytes of pod chains stay


@pytest.mark.parametrize("chain,dropped", [("KUBE-SEP-7IQ4BEXR3ZPJBRAS", True), ("KUBE-SVC-TCOU7JCQXEZGVUNU", True),
                                           ("KUBE-FW-ABC", True), ("KUBE-SERVICES", False), ("INPUT", False)])
def test_iptables_kube_proxy_chains(chain, dropped):
    rules = load_rule_file(str(RULES / "iptables.yml"))
    series = canonical({"__name__": "iptables_rule_bytes_total", "table": "nat", "chain": chain,
                        "rule": "-j KUBE-MARK-MASQ", "comment": "default/web:http"}.items())
    assert (rules.apply(series) is None) == dropped


# --- kube-apiserver.yml ---------------------------------------------------------------------------------
def le_values(pairs):
    return {dict(o)["le"] for _, o in pairs if o is not None}


def test_apiserver_latency_buckets(relabelled):
    pairs = by_name(relabelled, "apiserver_request_duration_seconds_bucket")
    assert le_values(pairs) == {"0.05", "0.1", "0.2", "0.4", "1", "2", "5", "10", "30", "60", "+Inf"}
    assert all(i == o for i, o in pairs if o is not None)  # kept buckets are untouched


def test_etcd_latency_buckets(relabelled):
    pairs = by_name(relabelled, "etcd_request_duration_seconds_bucket")
    assert le_values(pairs) == {"0.025", "0.1", "0.4", "1", "5", "+Inf"}
    assert by_name(relabelled, "etcd_request_duration_seconds_count")  # mean latency stays


@pytest.mark.parametrize("name,le,dropped", [
    ("apiserver_request_sli_duration_seconds_bucket", "1", True), ("apiserver_request_slo_duration_seconds_count", "", True),
    ("apiserver_watch_events_sizes_bucket", "1024", True), ("apiserver_response_sizes_bucket", "1e+06", True),
    ("apiserver_request_duration_seconds_bucket", "3.0", True),  # "3.0" spelling of a dropped bucket
    ("apiserver_request_duration_seconds_bucket", "30", False), ("apiserver_watch_events_total", "", False),
])
def test_apiserver_other_histograms(name, le, dropped):
    rules = load_rule_file(str(RULES / "kube-apiserver.yml"))
    series = canonical({"__name__": name, "le": le, "verb": "LIST", "resource": "pods", "scope": "cluster",
                        "component": "apiserver", "group": "", "version": "v1"}.items())
    assert (rules.apply(series) is None) == dropped
