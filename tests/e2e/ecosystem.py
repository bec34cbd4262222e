"""Start the real Prometheus ecosystem around metricsgw: node-exporter, vmagent, vmalert, Alertmanager.

Every helper starts one Debian binary on a free 127.0.0.1 port with its files in a directory the
caller owns (no systemd, no /etc, no /var/lib), and returns a ``testkit.procs.Server`` (stop() it).
``urls`` are plain base URLs, so a caller can point them at TLS endpoints as well.
Also: reading a server's own /metrics and waiting for a condition.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

from testkit.procs import Server, _spawn, free_port

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
VMAGENT = "/usr/bin/vmagent"
VMALERT = "/usr/bin/vmalert"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
PROMTOOL = "/usr/bin/promtool"

T = TypeVar("T")


def _need(binary: str) -> None:
    if not Path(binary).exists():
        raise RuntimeError(f"{binary} is not installed (make test installs the Debian packages in DEB_PACKAGES)")


def start_node_exporter(work_dir: Path, textfile_dir: Path, port: int | None = None) -> Server:
    """node-exporter with a private textfile directory. Collectors whose values are per-call
    measurements of this machine stay on: Prometheus and metricsgw see the same scrape anyway."""
    _need(NODE_EXPORTER)
    port = port or free_port()
    textfile_dir.mkdir(parents=True, exist_ok=True)
    argv = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
            f"--collector.textfile.directory={textfile_dir}", "--log.level=warn"]
    return _spawn("node-exporter", argv, work_dir / "data", port, ready_path="/metrics")


def start_alertmanager(work_dir: Path, port: int | None = None) -> Server:
    """Alertmanager that keeps the alerts it receives (API v2) and notifies no one; no cluster port."""
    _need(ALERTMANAGER)
    port = port or free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "alertmanager.yml"
    config.write_text("route:\n  receiver: keep\n  group_wait: 0s\nreceivers:\n  - name: keep\n")
    argv = [ALERTMANAGER, f"--config.file={config}", f"--storage.path={work_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"]
    return _spawn("alertmanager", argv, work_dir / "data", port)


def start_vmagent(work_dir: Path, scrape_config: str, remote_write_url: str, port: int | None = None,
                  extra: list[str] | None = None) -> Server:
    """vmagent scraping with ``scrape_config`` (Prometheus syntax) and remote-writing (1.0) to the URL."""
    _need(VMAGENT)
    port = port or free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "scrape.yml"
    config.write_text(scrape_config)
    argv = [VMAGENT, f"-httpListenAddr=127.0.0.1:{port}", f"-promscrape.config={config}",
            "-promscrape.config.strictParse", f"-remoteWrite.url={remote_write_url}",
            f"-remoteWrite.tmpDataPath={work_dir / 'data'}", "-remoteWrite.flushInterval=500ms",
            "-loggerLevel=WARN", *(extra or [])]
    return _spawn("vmagent", argv, work_dir / "data", port, ready_path="/health")


def start_vmalert(work_dir: Path, rule_files: list[Path], datasource_url: str, remote_write_url: str,
                  notifier_url: str, port: int | None = None, interval: str = "1s",
                  extra: list[str] | None = None) -> Server:
    """vmalert evaluating ``rule_files`` against a Prometheus API (metricsgw), writing recordings and
    alert state back by remote write (vmalert appends /api/v1/write) and sending alerts to Alertmanager."""
    _need(VMALERT)
    port = port or free_port()
    (work_dir / "data").mkdir(parents=True, exist_ok=True)
    argv = [VMALERT, f"-httpListenAddr=127.0.0.1:{port}", f"-datasource.url={datasource_url}",
            f"-remoteWrite.url={remote_write_url}", f"-notifier.url={notifier_url}",
            f"-evaluationInterval={interval}", "-remoteWrite.flushInterval=500ms", "-loggerLevel=WARN",
            *(f"-rule={f}" for f in rule_files), *(extra or [])]
    return _spawn("vmalert", argv, work_dir / "data", port, ready_path="/health")


def own_metrics(base_url: str) -> dict[tuple[str, tuple], float]:
    """A server's /metrics as {(name, sorted label pairs): value} (text format, no exemplars)."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        m = line_re.match(line)
        if not m or line.startswith("#"):
            continue
        labels = tuple(sorted(label_re.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric_sum(metrics: dict[tuple[str, tuple], float], name: str, **match: str) -> float:
    """Sum of a metric over the series whose labels match ``match`` (regex full match per label).
    A metric the server does not expose at all is an error, so a renamed counter cannot pass as 0."""
    if not any(n == name for n, _ in metrics):
        raise KeyError(f"{name} is not exposed (names like it: "
                       f"{sorted({n for n, _ in metrics if n.startswith(name.rsplit('_', 2)[0])})[:20]})")
    total = 0.0
    for (n, labels), v in metrics.items():
        d = dict(labels)
        if n == name and all(re.fullmatch(rx, d.get(k, "")) for k, rx in match.items()):
            total += v
    return total


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0, every_s: float = 0.5) -> T:
    """Poll ``probe`` until it returns something truthy; bounded, and the failure says what was awaited."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            got = probe()
        except OSError as err:  # not listening yet, or a refused connection: keep polling
            got, last = None, err
        if got:
            return got
        time.sleep(every_s)
    raise TimeoutError(f"gave up after {timeout_s:g}s waiting for {what} (last error: {last})")
