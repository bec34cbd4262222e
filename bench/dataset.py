"""The same history of the bench workload in metricsgw, Prometheus and VictoriaMetrics, kept on
disk for reuse.

    python -m bench.dataset --dir /var/tmp/bench-1000 --nodes 1000 --history 70m

Loading an hour of 1,000 nodes (90M samples) takes minutes per server, so the data dirs live
in ``--dir`` and a ``dataset.json`` there records what was loaded; a later run with the same
plan only restarts the servers on it. All three servers get identical samples: each slab of
scrapes is pre-encoded once and sent to the three at the same time. Requests carry
``samples_per_series`` consecutive scrapes of each series (a bulk load, not a live remote-write
shape: bench.ingest measures that). After the load every server is restarted, so queries
read what a restarted server serves (metricsgw: Parquet; Prometheus: its head, rebuilt from
its WAL; VictoriaMetrics: its flushed parts), and the restart time of each is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import send_all
from testkit.wire import build_requests, metadata_request


@dataclass(frozen=True)
class DatasetPlan:
    nodes: int = 1000
    history_s: float = 4200.0  # 70 min: an hour of dashboard plus the [5m] windows before it
    interval_s: float = 15.0
    seed: int = 0
    slab_scrapes: int = 20  # scrapes encoded (and held in memory) at a time
    samples_per_series: int = 20
    connections: int = 4


@dataclass
class Dataset:
    plan: DatasetPlan
    end_ms: int  # the last scrape's timestamp
    num_series: int
    load_s: dict[str, float]
    restart_s: dict[str, float]
    metricsgw: procs.Server
    prometheus: procs.Server
    victoria_metrics: procs.Server

    @property
    def servers(self) -> tuple[procs.Server, procs.Server, procs.Server]:
        return self.metricsgw, self.prometheus, self.victoria_metrics

    def stop(self) -> None:
        _stop_all(self.servers)


Servers = tuple[procs.Server, procs.Server, procs.Server]


def _stop_all(servers, timeout_s: float = 300) -> None:
    for server in servers:
        server.stop(timeout_s=timeout_s)


def _start_all(work: Path, gw_flags: list[str]) -> tuple[Servers, dict[str, float]]:
    t0 = time.perf_counter()
    # Answers are checked against Debian's Prometheus 2.42, so metricsgw answers as 2.x (a later flag overrides).
    gw_flags = ["--query.promql-compat=2", *gw_flags]
    servers = (procs.start_metricsgw(work / "metricsgw", extra=gw_flags), procs.start_prometheus(work / "prometheus"),
               procs.start_victoria_metrics(work / "victoria-metrics"))
    ready = {}
    try:
        for server in servers:
            server.wait_ready(timeout_s=1800)
            ready[server.name] = time.perf_counter() - t0
    except BaseException:
        _stop_all(servers)
        raise
    return servers, ready


def _files_per_partition(table: Path) -> Counter:
    if not DeltaTable.is_deltatable(str(table)):
        return Counter()
    acts = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    return Counter(int(h) for h in acts.column("partition.hour").to_pylist()) if acts.num_rows else Counter()


def _settled(data_dir: Path, end_ms: int, partition_ms: int = 3_600_000, timeout_s: float = 900.0) -> float:
    """Wait until compaction has left one Parquet file per hour partition that closed before the
    load's end (metricsgw compacts closed partitions in its background loop; the hour the load
    ended in stays open, in up to 16 files, until a later hour's samples arrive); seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        # The table's listing, not the directory: removed files stay on disk for --storage.vacuum-delay.
        files = _files_per_partition(data_dir / "table" / "samples")
        if files and all(n == 1 for h, n in files.items() if h + partition_ms <= end_ms):
            return time.perf_counter() - t0
        time.sleep(1.0)
    raise TimeoutError(f"{data_dir}: partitions not compacted after {timeout_s}s")


def _settle(servers: Servers, ready: dict[str, float], end_ms: int) -> dict[str, float]:
    try:
        return ready | {"metricsgw_compaction": _settled(servers[0].data_dir, end_ms)}
    except BaseException:
        _stop_all(servers)
        raise


def _load(plan: DatasetPlan, end_ms: int, servers: Servers) -> tuple[int, dict[str, float]]:
    from testkit.workload import Workload

    workload = Workload(plan.nodes, plan.seed)
    interval_ms = int(plan.interval_s * 1000)
    scrapes = int(plan.history_s // plan.interval_s)
    start_ms = end_ms - (scrapes - 1) * interval_ms
    took = {server.name: 0.0 for server in servers}
    preamble = [metadata_request(workload)]

    async def all_three(shards, first: bool):
        async def one(server: procs.Server):
            t0 = time.perf_counter()
            res = await send_all(server.write_url, shards, 3600, preamble if first else None, timeout_s=300,
                                 max_attempts=1000)  # a busy flush answers 503: wait, as Prometheus would
            took[server.name] += time.perf_counter() - t0
            if res.requests_failed or res.requests_not_sent:
                raise RuntimeError(f"{server.name}: {res.requests_failed} failed, {res.requests_not_sent} not "
                                   f"sent; first error: {res.first_error}")
        await asyncio.gather(*(one(server) for server in servers))

    for k0 in range(0, scrapes, plan.slab_scrapes):
        n = min(plan.slab_scrapes, scrapes - k0)
        shards = build_requests(workload, start_ms + k0 * interval_ms, n, interval_ms, plan.connections,
                                2000 * plan.samples_per_series, plan.samples_per_series)
        asyncio.run(all_three(shards, k0 == 0))
        print(f"  loaded scrapes {k0 + n}/{scrapes} ({took})", flush=True)
    procs.victoria_metrics_flush(servers[2])  # its last seconds of samples are still in memory
    return workload.num_series, took


def open_dataset(work: Path, plan: DatasetPlan, gw_flags: list[str] | None = None) -> Dataset:
    """Servers running on `work`'s data, loading it first if it is not there (or was another plan)."""
    work.mkdir(parents=True, exist_ok=True)
    marker = work / "dataset.json"
    saved = json.loads(marker.read_text()) if marker.exists() else None
    if saved and saved["plan"] == asdict(plan) and (work / "victoria-metrics").is_dir():
        servers, ready = _start_all(work, gw_flags or [])
        restart = _settle(servers, ready, saved["end_ms"])
        return Dataset(plan, saved["end_ms"], saved["num_series"], saved["load_s"], restart, *servers)
    if saved or any(work.iterdir()):
        raise RuntimeError(f"{work} holds other data (or a dataset from before VictoriaMetrics joined): "
                           "remove it or pick another --dir")
    servers, _ = _start_all(work, gw_flags or [])
    interval_ms = int(plan.interval_s * 1000)
    end_ms = int(time.time() * 1000) // interval_ms * interval_ms
    try:
        num_series, took = _load(plan, end_ms, servers)
    finally:
        _stop_all(servers, timeout_s=600)
    marker.write_text(json.dumps({"plan": asdict(plan), "end_ms": end_ms, "num_series": num_series,
                                  "load_s": took}, indent=2))
    servers, ready = _start_all(work, gw_flags or [])
    return Dataset(plan, end_ms, num_series, took, _settle(servers, ready, end_ms), *servers)


def plan_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--dir", required=True, type=Path, help="where the data dirs live (reused across runs)")
    ap.add_argument("--nodes", type=int, default=DatasetPlan.nodes)
    ap.add_argument("--history", default="70m", help="span of loaded data, ending at load time")
    ap.add_argument("--seed", type=int, default=DatasetPlan.seed)
    ap.add_argument("--metricsgw-flag", action="append", default=[], help="extra flag for metricsgw serve")


def plan_of(a: argparse.Namespace) -> DatasetPlan:
    return DatasetPlan(nodes=a.nodes, history_s=parse_duration(a.history), seed=a.seed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    plan_args(ap)
    ap.add_argument("--serve", action="store_true", help="keep the servers running until interrupted")
    a = ap.parse_args(argv)
    ds = open_dataset(a.dir, plan_of(a), a.metricsgw_flag)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops the servers cleanly too
    try:
        print(json.dumps({"end_ms": ds.end_ms, "num_series": ds.num_series, "load_s": ds.load_s,
                          "restart_s": ds.restart_s, "metricsgw": ds.metricsgw.base_url,
                          "prometheus": ds.prometheus.base_url,
                          "victoria-metrics": ds.victoria_metrics.base_url}, indent=2), flush=True)
        while a.serve:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        ds.stop()


if __name__ == "__main__":
    main()
