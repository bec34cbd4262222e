"""Whole gateways, the table on an object store against the table on local disk (issue 34): remote-write ingest and
the dashboard's range queries.

    python -m bench.object_store_gateways --nodes 100 --history 70m --repeat 5

moto in server mode on loopback (testkit/s3.py) is the store. Two gateways in the default layout, one with its
table under --storage.path and one with ``--storage.table-url=s3://...``, are sent the same pre-encoded remote
writes (the bench workload: ``--nodes`` nodes' series, ``--history`` of scrapes at 15 s, 4 connections, as
bench.dataset sends them), one gateway at a time and in turns by slab, so neither always has the quieter machine.
Then the dashboard's range queries (testkit/panels.py) over the last hour at a 30 s step, ``--repeat`` times each,
the two in turn (bench.queries.run), every answer compared, after both were stopped (flushing their heads to
the table) and started again, so the queries read the table. Reported as the store's ratio to local: ingest
samples/s, each query's median latency, and the median of those ratios (issue 34: within 1.1x and 1.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench import queries
from metricsgw.config import parse_duration
from testkit import procs
from testkit.load import send_all
from testkit.s3 import REGION, MotoServer
from testkit.wire import build_requests, metadata_request

INTERVAL_MS = 15_000
SLAB_SCRAPES = 20


def _start(work: Path, moto: MotoServer, bucket: str | None) -> procs.Server:
    # The results cache off: a repeat would be answered from memory, and the reads are what is compared.
    extra = ["--query.promql-compat=2", "--query.cache-results=false"]
    if bucket is not None:
        extra += [f"--storage.table-url=s3://{bucket}/metrics", f"--storage.s3.endpoint={moto.endpoint}",
                  f"--storage.s3.region={REGION}", "--storage.s3.force-path-style=true"]
    server = procs.start_metricsgw(work, extra=extra, env=moto.env())
    server.wait_ready(timeout_s=300)
    return server


def load(servers: dict[str, procs.Server], nodes: int, history_s: float, end_ms: int) -> tuple[int, dict[str, float]]:
    """Every slab to each server in turn (the order alternating by slab); seconds each took, and the samples."""
    from testkit.workload import Workload

    workload = Workload(nodes, 0)
    scrapes = int(history_s // (INTERVAL_MS / 1000))
    start_ms = end_ms - (scrapes - 1) * INTERVAL_MS
    took = {name: 0.0 for name in servers}
    samples = 0
    order = list(servers)
    for n_slab, k0 in enumerate(range(0, scrapes, SLAB_SCRAPES)):
        n = min(SLAB_SCRAPES, scrapes - k0)
        shards = build_requests(workload, start_ms + k0 * INTERVAL_MS, n, INTERVAL_MS, 4, 2000 * 20, 20)
        samples += sum(r.samples for shard in shards for r in shard)
        for name in order if n_slab % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            res = asyncio.run(send_all(servers[name].write_url, shards, 3600,
                                       [metadata_request(workload)] if k0 == 0 else None, timeout_s=300,
                                       max_attempts=1000))
            took[name] += time.perf_counter() - t0
            if res.requests_failed or res.requests_not_sent:
                raise RuntimeError(f"{name}: {res.requests_failed} failed, {res.requests_not_sent} not sent; "
                                   f"first error: {res.first_error}")
        print(f"  loaded scrapes {k0 + n}/{scrapes} ({ {k: round(v, 1) for k, v in took.items()} })", flush=True)
    return samples, took


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--history", default="70m")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    end_ms = int(time.time() * 1000) // INTERVAL_MS * INTERVAL_MS
    with tempfile.TemporaryDirectory(prefix="bench-store-gw-") as tmp:
        work = Path(tmp)
        (work / "moto").mkdir()
        moto = MotoServer(work / "moto")
        servers: dict[str, procs.Server] = {}
        ready_s: dict[str, float] = {}
        try:
            servers["local"] = _start(work / "local", moto, None)
            servers["store"] = _start(work / "store", moto, moto.bucket("bench"))
            samples, took = load(servers, a.nodes, parse_duration(a.history), end_ms)
            # Stopped (the heads flushed to the table: uploaded, for the store) and started again on the same
            # directories, so the queries read the table, not the memory of the load.
            bucket = {"local": None, "store": "bench"}
            for name in list(servers):
                servers.pop(name).stop(timeout_s=600)
            for name in ("local", "store"):
                t0 = time.perf_counter()
                servers[name] = _start(work / name, moto, bucket[name])
                ready_s[name] = time.perf_counter() - t0
            results = queries.run({name: s.base_url for name, s in servers.items()}, end_ms / 1000, 3600.0, 30.0,
                                  repeat=a.repeat, reference="local")
        finally:
            for server in servers.values():
                server.stop(timeout_s=300)
            moto.stop()
    print(f"\n{a.nodes} nodes, {a.history} of scrapes at 15 s: {samples:,} samples; moto on loopback\n")
    print("| | local | store | store / local |\n|---|---|---|---|")
    rate = {name: samples / s for name, s in took.items()}
    print(f"| ingest, samples/s | {rate['local']:,.0f} | {rate['store']:,.0f} | {rate['store'] / rate['local']:.2f} |")
    print(f"| restart to ready (after a clean stop), s | {ready_s['local']:.1f} | {ready_s['store']:.1f} | "
          f"{ready_s['store'] / ready_s['local']:.2f} |")
    ratios = []
    for r in results:
        lo, st = r.median("local"), r.median("store")
        ratios.append(st / lo)
        same = "" if r.agree.get("store", False) else " DIFFERENT" if r.answered("store") else f" {r.error}"
        print(f"| {r.panel}, s | {lo:.3f} | {st:.3f} | {st / lo:.2f}{same} |")
    print(f"| median of the {len(ratios)} queries' ratios | | | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
