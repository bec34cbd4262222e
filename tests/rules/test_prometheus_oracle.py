"""Relabel results agree with real Prometheus (2.42): it scrapes the same series with the same rules.

One Prometheus process scrapes a small exporter served here, one job per case, each job with
its own metric_relabel_configs; the series API then shows what Prometheus kept. Each case keeps
the job label, so results can be told apart. Known, deliberate difference: our regexes use
``(?s)`` (``.`` matches a newline, as in Prometheus 3), so no case here relies on newlines.
"""

from __future__ import annotations

import http.server
import json
import pathlib
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from metricsgw.model import canonical
from metricsgw.rules.relabel import RuleSet

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed")
RULES = pathlib.Path(__file__).resolve().parents[2] / "rules" / "relabel"

INPUT = [  # (metric name, labels) exposed by the exporter for every case
    ("m", {"a": "foo", "b": "bar", "c": "baz"}),
    ("m", {"a": "some-name-value", "name": "old"}),
    ("m", {"a": "ΣΑΣ ß İx", "b": "v"}),
    ("m", {"a": "k=v", "x_b": "mapped", "b": "orig"}),
    ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "UUID": "GPU-1", "device": "nvidia0", "Hostname": "h",
                              "DCGM_FI_DRIVER_VERSION": "535.129.03", "modelName": "H100", "pod": "p"}),
    ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-1", "device": "nvidia0", "Hostname": "h",
                              "DCGM_FI_DRIVER_VERSION": "535.129.03", "modelName": "H100", "pod": "p"}),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", {"gpu": "0", "UUID": "GPU-1"}),
    ("apiserver_request_duration_seconds_bucket", {"le": "0.005", "verb": "GET"}),
    ("apiserver_request_duration_seconds_bucket", {"le": "1", "verb": "GET"}),
    ("iptables_rule_bytes_total", {"chain": "KUBE-SEP-ABC", "rule": "-j DNAT", "comment": "ns/svc"}),
    ("iptables_rule_bytes_total", {"chain": "INPUT", "rule": "-j ACCEPT", "comment": "ssh"}),
]

CASES = [
    # a templated target whose replacement is empty deletes the expanded target (which exists here)
    [dict(source_labels=["a"], regex="some-([^-]+)-(.*)", target_label="${1}", replacement="${3}")],
    [dict(source_labels=["a"], regex="some-([^-]+)-(.*)", target_label="${1}", replacement="${2}")],
    [dict(source_labels=["a", "b"], regex="f(.*);(.*)r", target_label="a", replacement="b${1}${2}m")],
    [dict(source_labels=["a"], regex="(?P<k>[^=]+)=(?P<v>.*)", target_label="$k", replacement="${v}|$1x|$$|${9}")],
    [dict(source_labels=["a"], regex="f|o", action="drop"), dict(source_labels=["b"], regex="ba.", action="drop")],
    [dict(source_labels=["c"], regex="baz", action="keep")],
    [dict(source_labels=["a", "missing", "b"], separator="+", target_label="joined")],
    [dict(target_label="fixed", replacement="yes")],
    [dict(source_labels=["a"], target_label="h", action="hashmod", modulus=977)],
    [dict(regex="x_(.*)", replacement="$1", action="labelmap")],
    [dict(regex="(a|c)", action="labeldrop")],
    [dict(regex="__name__|job|instance|gpu|a", action="labelkeep")],
    [dict(source_labels=["a"], action="lowercase", target_label="lo"),
     dict(source_labels=["a"], action="uppercase", target_label="up")],
    [dict(source_labels=["b"], action="keepequal", target_label="c")],
    [dict(source_labels=["a"], action="dropequal", target_label="a")],
    [dict(source_labels=["a"], regex="(.*)", target_label="a", replacement="")],  # empty result deletes
]
SHIPPED = ["dcgm.yml", "iptables.yml", "kube-apiserver.yml"]


def exposition() -> bytes:
    def esc(v):
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lines = []
    for name, lab in INPUT:
        pairs = ",".join('%s="%s"' % (k, esc(v)) for k, v in lab.items())
        lines.append(f"{name}{{{pairs}}} 1")
    return ("\n".join(lines) + "\n").encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def prometheus_series(tmp_path_factory):
    body = exposition()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    all_cases = {f"case_{i}": rules for i, rules in enumerate(CASES)}
    for name in SHIPPED:
        all_cases["shipped_" + name.split(".")[0].replace("-", "_")] = yaml.safe_load((RULES / name).read_text())
    tmp = tmp_path_factory.mktemp("prom")
    cfg = {"global": {"scrape_interval": "1s"},
           "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}],
                               "metric_relabel_configs": rules} for job, rules in all_cases.items()]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg, allow_unicode=True))
    port = free_port()
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        deadline = time.monotonic() + 60
        while True:  # wait until every job has been scraped once
            try:
                q = urllib.parse.quote("count(scrape_samples_post_metric_relabeling)")
                res = get(f"{api}/query?query={q}")["data"]["result"]
                if res and int(res[0]["value"][1]) == len(all_cases):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not scrape in time")
            time.sleep(0.2)
        match = urllib.parse.quote('{__name__=~".+", __name__!~"up|scrape_.*"}')
        series = get(f"{api}/series?match[]={match}")["data"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()
    by_job: dict[str, set] = {job: set() for job in all_cases}
    for s in series:
        by_job[s["job"]].add(canonical(s.items()))
    return all_cases, by_job, target


def test_same_results_as_prometheus(prometheus_series):
    all_cases, by_job, target = prometheus_series
    for job, rules in all_cases.items():
        rs = RuleSet.from_configs(rules)
        ours = set()
        for name, lab in INPUT:
            out = rs.apply(canonical({"__name__": name, **lab, "job": job, "instance": target}.items()))
            if out is not None:
                ours.add(out)
        assert ours == by_job[job], job
