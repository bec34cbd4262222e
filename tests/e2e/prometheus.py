"""A real Prometheus that scrapes a small exporter served by the test and remote-writes to metricsgw."""

from __future__ import annotations

import re
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from testkit.procs import PROMETHEUS, Server, _spawn, free_port
from testkit.workload import Workload


class Exporter:
    """Serves the bench workload's exposition for a few nodes; values follow the wall clock.

    ``families`` (a regex on the metric family name) keeps only some families; ``extra`` is
    exposition text appended as is (series the workload does not have)."""

    def __init__(self, nodes: int = 2, seed: int = 7, node_range: range | None = None,
                 families: str | None = None, extra: str = "") -> None:
        self.workload = Workload(nodes, seed=seed)
        self.nodes = node_range if node_range is not None else range(nodes)
        self.families = re.compile(families) if families else None
        self.extra = extra
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = exporter.body(int(time.time() * 1000)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def body(self, t_ms: int) -> str:
        text = self.workload.exposition(t_ms, self.nodes)
        if self.families is not None:
            text = "".join(line for line in text.splitlines(keepends=True) if self._kept(line))
        return text + self.extra

    def _kept(self, line: str) -> bool:
        name = line.split(" ", 3)[2] if line.startswith("# ") else re.split(r"[{ ]", line, 1)[0]
        return self.families.match(name) is not None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_scraping_prometheus(work_dir: Path, target: str, remote_write_url: str,
                              scrape_interval: str = "1s", protobuf_message: str | None = None) -> Server:
    jobs = [{"job_name": "exporter", "static_configs": [{"targets": [target]}]}]
    return start_prometheus_sender(work_dir, jobs, remote_write_url, scrape_interval)


def start_prometheus_sender(work_dir: Path, scrape_configs: list[dict], remote_write_url: str,
                            scrape_interval: str = "1s", queue: dict | None = None,
                            rule_files: list[Path] | None = None, more_remote_write: list[dict] = ()) -> Server:
    """Prometheus scraping ``scrape_configs`` and remote-writing everything to ``remote_write_url``
    (small batches, quick retries: a test sees its samples within a second or two), and through
    the ``more_remote_write`` entries (e.g. shards, with their own relabelling) with the same queue."""
    if shutil.which(PROMETHEUS) is None and not Path(PROMETHEUS).exists():
        raise RuntimeError("Debian's prometheus package is not installed (make test installs it)")
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "prometheus.yml"
    cfg = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": scrape_configs,
        "remote_write": [{
            "url": url,
            "queue_config": {"batch_send_deadline": "500ms", "max_samples_per_send": 2000,
                             "min_backoff": "50ms", "max_backoff": "1s", **(queue or {})},
            "metadata_config": {"send_interval": "2s"},
            **entry,
        } for url, entry in [(remote_write_url, {})] + [(e["url"], e) for e in more_remote_write]],
    }
    if rule_files:
        cfg["rule_files"] = [str(f) for f in rule_files]
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv = [PROMETHEUS, f"--storage.tsdb.path={work_dir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={config}", "--log.level=warn"]
    return _spawn("prometheus", argv, work_dir / "data", port)
