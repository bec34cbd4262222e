"""Start and stop the servers under test; sample their CPU and memory; measure their disk.

Every server listens on 127.0.0.1 on a free port and writes into a data dir we own.
CPU is user+system seconds of the server process (and its children) from psutil;
RSS is sampled every 0.1 s (peak and last). Disk is counted by walking the data dir,
split by what the bytes are (Prometheus: WAL vs head chunks vs blocks; metricsgw: WAL vs
Parquet vs the rest; VictoriaMetrics: data parts vs indexdb), because a young Prometheus keeps
everything in its WAL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PROMETHEUS = "/usr/bin/prometheus"
VICTORIA_METRICS = "/usr/bin/victoria-metrics"
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclass
class Server:
    name: str
    base_url: str
    data_dir: Path
    proc: subprocess.Popen
    log_path: Path
    ready_path: str = "/-/ready"  # what answers 200 once the server is serving (vmagent: /health)

    @property
    def write_url(self) -> str:
        return self.base_url + "/api/v1/write"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log: {self.log_tail()}")
            try:
                if http_get(self.base_url + self.ready_path, timeout=1.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout_s}s; log: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL to the server and every process it started (its session): a crash of the whole server,
        as the machine losing power or the OOM killer would make it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (every server shuts down cleanly on it), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def _spawn(name: str, argv: list[str], data_dir: Path, port: int, cwd: Path | None = None,
           env: dict[str, str] | None = None, ready_path: str = "/-/ready") -> Server:
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{name}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
                            env={**os.environ, **env} if env else None)
    log.close()
    return Server(name, f"http://127.0.0.1:{port}", data_dir, proc, log_path, ready_path)


def start_prometheus(work_dir: Path, port: int | None = None, extra: list[str] | None = None,
                     config_yaml: str = "") -> Server:
    """Real Prometheus as a remote-write receiver with nothing to scrape (admin API for snapshots);
    ``config_yaml`` is appended to its configuration (e.g. a remote_read section)."""
    port = port or free_port()
    config = work_dir / "prometheus.yml"
    work_dir.mkdir(parents=True, exist_ok=True)
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n" + config_yaml)
    argv = [PROMETHEUS, "--web.enable-remote-write-receiver", "--web.enable-admin-api",
            f"--storage.tsdb.path={work_dir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={config}", "--log.level=warn", *(extra or [])]
    return _spawn("prometheus", argv, work_dir / "data", port)


def start_victoria_metrics(work_dir: Path, port: int | None = None, extra: list[str] | None = None) -> Server:
    """Debian's single-node VictoriaMetrics as a remote-write receiver (/api/v1/write) and PromQL
    server (/api/v1/query_range), set up for a like-for-like comparison:
    - -search.disableCache: no rollup result cache, so a repeated dashboard query is computed
      again, as metricsgw and Prometheus compute it ("caches off");
    - -search.latencyOffset=0: data written a moment ago is queryable (default: hidden for 30 s);
    - -search.maxUniqueTimeseries/-search.maxSamplesPerQuery raised: the defaults refuse the bigger
      dashboard queries at a thousand nodes, which the other two servers answer;
    - -retentionPeriod=100y: loaded history is never dropped, whatever its timestamps;
    - no -dedup.minScrapeInterval: every sample is kept, as the others keep them."""
    port = port or free_port()
    argv = [VICTORIA_METRICS, f"-storageDataPath={work_dir / 'data'}", f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y", "-search.disableCache", "-search.latencyOffset=0",
            "-search.maxUniqueTimeseries=100000000", "-search.maxSamplesPerQuery=100000000000",
            "-search.maxQueryDuration=10m", "-loggerLevel=ERROR", *(extra or [])]
    return _spawn("victoria-metrics", argv, work_dir / "data", port, ready_path="/health")


def start_metricsgw(work_dir: Path, port: int | None = None, extra: list[str] | None = None,
                    env: dict[str, str] | None = None) -> Server:
    port = port or free_port()
    argv = [sys.executable, "-m", "metricsgw", "serve", f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.path={work_dir / 'data'}", *(extra or [])]
    return _spawn("metricsgw", argv, work_dir / "data", port, cwd=REPO, env=env)


# The servers the benches compare, by the names their --targets take; each starts as
# STARTERS[kind](work_dir, port=None, extra=None) and answers 200 on server.ready_path once serving.
STARTERS = {"metricsgw": start_metricsgw, "prometheus": start_prometheus, "victoria-metrics": start_victoria_metrics}


def targets(text: str) -> list[str]:
    """The server names of a --targets value ("metricsgw,prometheus"), in the order given."""
    return [t.strip() for t in text.split(",") if t.strip()]


def gateway_children(front_pid: int) -> dict[str, psutil.Process]:
    """{"shard-0": process, "querier-0": ...}: the children a metricsgw front runs now (by their --role/--index)."""
    out = {}
    for p in psutil.Process(front_pid).children():
        try:
            args = p.cmdline()
            alive = p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            continue
        role = next((a.split("=", 1)[1] for a in args if a.startswith("--role=")), None)
        index = next((a.split("=", 1)[1] for a in args if a.startswith("--index=")), None)
        if role and alive:
            out[f"{role}-{index}"] = p
    return out


def tree_rss(pid: int) -> int:
    """RSS of a process and the processes it runs (metricsgw's front and its children), bytes."""
    proc = psutil.Process(pid)
    rss = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            rss += child.memory_info().rss
        except psutil.Error:
            pass
    return rss


def tree_pss(pid: int) -> int:
    """Pss of a process tree, bytes: pages shared between the front and its children (forked code, the shared
    sample arrays) count once over the tree, not once per process as RSS sums them."""
    proc = psutil.Process(pid)
    pss = proc.memory_full_info().pss
    for child in proc.children(recursive=True):
        try:
            pss += child.memory_full_info().pss
        except psutil.Error:
            pass
    return pss


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of a process and the processes it runs now (metricsgw's front and its
    children), plus those it has waited for; None if the process is gone."""
    try:
        proc = psutil.Process(pid)
        t = proc.cpu_times()
        kids = proc.children(recursive=True)
    except psutil.Error:
        return None
    total = t.user + t.system + t.children_user + t.children_system
    for kid in kids:
        try:
            k = kid.cpu_times()
        except psutil.Error:
            continue
        total += k.user + k.system
    return total


@dataclass
class Usage:
    cpu_s: float = 0.0
    rss_peak: int = 0
    rss_last: int = 0
    pss_peak: int = 0  # read each PSS_EVERY samples (Pss costs a walk of the page tables)
    samples: int = 0


PSS_EVERY = 10


class ResourceSampler:
    """Background thread: CPU seconds, RSS and Pss of a process tree between start() and stop()."""

    def __init__(self, pid: int, period_s: float = 0.1) -> None:
        self.proc = psutil.Process(pid)
        self.period_s = period_s
        self.usage = Usage()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu0 = 0.0

    def _cpu(self) -> float:
        return tree_cpu_s(self.proc.pid) or 0.0

    def _rss(self) -> int:
        return tree_rss(self.proc.pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self._rss()
            except psutil.Error:
                return
            self.usage.rss_last = rss
            self.usage.rss_peak = max(self.usage.rss_peak, rss)
            if self.usage.samples % PSS_EVERY == 0:
                try:
                    self.usage.pss_peak = max(self.usage.pss_peak, tree_pss(self.proc.pid))
                except psutil.Error:
                    return
            self.usage.samples += 1
            self._stop.wait(self.period_s)

    def start(self) -> "ResourceSampler":
        self._cpu0 = self._cpu()
        self._thread.start()
        return self

    def stop(self) -> Usage:
        self._stop.set()
        self._thread.join()
        try:
            self.usage.cpu_s = self._cpu() - self._cpu0
            self.usage.rss_last = self._rss()
            self.usage.rss_peak = max(self.usage.rss_peak, self.usage.rss_last)
        except psutil.Error:
            pass
        return self.usage


def wait_idle(pid: int | None, max_s: float = 120.0, window_s: float = 0.5, below: float = 0.2) -> None:
    """Wait until a server's process tree uses under ``below`` of a core over ``window_s`` (at most ``max_s``):
    what a fresh server still does after it says ready (metricsgw's query process loads its compiled kernels,
    Prometheus goes on after a client leaves) is not the load a bench measures next."""
    if not pid:
        return
    end = time.monotonic() + max_s
    while time.monotonic() < end:
        c0 = tree_cpu_s(pid) or 0.0
        time.sleep(window_s)
        if (tree_cpu_s(pid) or 0.0) - c0 < below * window_s:
            return


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


@dataclass
class Disk:
    total: int = 0
    parts: dict[str, int] = field(default_factory=dict)


def prometheus_disk(data_dir: Path) -> Disk:
    """wal/ (incl. checkpoints), chunks_head/ (mmapped head chunks), blocks (ULID dirs)."""
    parts = {"wal": dir_bytes(data_dir / "wal"), "chunks_head": dir_bytes(data_dir / "chunks_head"),
             "blocks": sum(dir_bytes(p) for p in data_dir.iterdir() if p.is_dir() and len(p.name) == 26)}
    return Disk(dir_bytes(data_dir) - dir_bytes(data_dir / "snapshots"), parts)


def prometheus_snapshot(server: Server) -> Disk:
    """Ask Prometheus to write its head as a block (admin API) and measure that block.

    That is the size the data would have after compaction: the fair at-rest figure."""
    req = urllib.request.Request(server.base_url + "/api/v1/admin/tsdb/snapshot", method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        name = json.loads(r.read())["data"]["name"]
    snap = server.data_dir / "snapshots" / name
    chunks = sum(dir_bytes(p / "chunks") for p in snap.iterdir() if p.is_dir())
    index = sum((p / "index").stat().st_size for p in snap.iterdir() if (p / "index").exists())
    return Disk(dir_bytes(snap), {"chunks": chunks, "index": index})


def metricsgw_disk(data_dir: Path) -> Disk:
    parts = {"parquet": 0, "wal": 0, "other": 0}
    for root, _dirs, files in os.walk(data_dir):
        for f in files:
            p = os.path.join(root, f)
            try:
                size = os.stat(p).st_size
            except OSError:
                continue
            # wal/<writer id>/ also holds the writer's series checkpoint and metadata: only segments are WAL
            key = "parquet" if f.endswith(".parquet") else "wal" if f.endswith(".wal") else "other"
            parts[key] += size
    return Disk(sum(parts.values()), parts)


def victoria_metrics_flush(server: Server) -> None:
    """Make what VictoriaMetrics has acknowledged searchable (its index and samples wait in memory
    for a second or two otherwise). VictoriaMetrics 1.79 does not write the samples' parts to disk
    for this: they reach data/ when merged or at shutdown, so measure its disk after a clean stop."""
    status, body = http_get(server.base_url + "/internal/force_flush", timeout=600)
    if status != 200:
        raise RuntimeError(f"victoria-metrics force_flush: {status} {body[:200]!r}")


def victoria_metrics_disk(data_dir: Path) -> Disk:
    """data/ (the samples' parts) + indexdb/ (the series index) + the rest; cache/ (the caches it
    saves at shutdown, rebuilt if lost) is shown but not counted."""
    parts = {"data": dir_bytes(data_dir / "data"), "indexdb": dir_bytes(data_dir / "indexdb"),
             "cache": dir_bytes(data_dir / "cache")}
    parts["other"] = dir_bytes(data_dir) - sum(parts.values())
    return Disk(parts["data"] + parts["indexdb"] + parts["other"], parts)
