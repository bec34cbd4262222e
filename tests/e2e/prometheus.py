"""A real Prometheus that scrapes a small exporter served by the test and remote-writes to metricsgw."""

from __future__ import annotations

import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.procs import PROMETHEUS, Server, _spawn, free_port
from bench.workload import Workload


class Exporter:
    """Serves the bench workload's exposition for a few nodes; values follow the wall clock."""

    def __init__(self, nodes: int = 2, seed: int = 7) -> None:
        self.workload = Workload(nodes, seed=seed)
        self.nodes = range(nodes)
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = exporter.workload.exposition(int(time.time() * 1000), exporter.nodes).encode()
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

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_scraping_prometheus(work_dir: Path, target: str, remote_write_url: str,
                              scrape_interval: str = "1s", protobuf_message: str | None = None) -> Server:
    if shutil.which(PROMETHEUS) is None and not Path(PROMETHEUS).exists():
        raise RuntimeError("Debian's prometheus package is not installed (make test installs it)")
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: {scrape_interval}
  evaluation_interval: {scrape_interval}
scrape_configs:
  - job_name: exporter
    static_configs:
      - targets: ["{target}"]
remote_write:
  - url: {remote_write_url}
    queue_config:
      batch_send_deadline: 500ms
      max_samples_per_send: 2000
      min_backoff: 50ms
      max_backoff: 1s
    metadata_config:
      send_interval: 2s
""")
    argv = [PROMETHEUS, f"--storage.tsdb.path={work_dir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={config}", "--log.level=warn"]
    return _spawn("prometheus", argv, work_dir / "data", port)
