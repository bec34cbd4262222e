"""CPU time of the dashboard panels inside one process: the engine and the JSON rendering, no HTTP.

    python -m bench.engine_cpu --dir /var/tmp/bench-100            # a bench.dataset dir, servers stopped
    python -m bench.engine_cpu --dir /var/tmp/bench-100 --copy-to /tmp/gw   # reads a copy (the original stays as it is)

bench.queries measures wall-clock latency through HTTP on a shared machine, where other work moves
every figure; this measures what a panel costs metricsgw itself: process CPU time (all threads,
DuckDB's included) of ``engine.range`` + ``render_json`` over the dataset's metricsgw directory, with
the settings a default gateway uses (--query.max-memory 1GiB: its cache, DuckDB and per-query
shares; the allocator tuned by malloc.tune, as every metricsgw process has it, which moved the heavy
panels' CPU by 2x). The first run of each panel is cold (Parquet read and cached), the median of the
others is a refresh. Run it in two checkouts to compare code: the same data, the same machine, one after the
other. Opening the directory takes its writer lock and replays its WAL, as a restart does; it is
closed without a flush (``--copy-to`` leaves the dataset untouched altogether).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from metricsgw import gcpolicy, malloc
from metricsgw.api.query import render_charged
from metricsgw.config import load as load_config
from metricsgw.limits.context import QueryContext
from metricsgw.limits.memory import MemoryShares, pool_for
from metricsgw.promql.engine import Engine
from metricsgw.storage.store import Storage
from testkit.panels import DASHBOARD_QUERIES


def measure(data_dir: Path, end_s: float, repeat: int, window_s: float = 3600.0, step_s: float = 30.0) -> dict:
    cfg = load_config({"storage.path": str(data_dir)})
    memory = MemoryShares.of(cfg.query_max_memory)
    pool = pool_for(memory, cfg.query_max_concurrency)
    storage = Storage(str(data_dir), duckdb_memory_limit=memory.duckdb, sample_cache_bytes=memory.cache,
                      duckdb_threads=cfg.storage_duckdb_threads)
    storage.open()
    engine = Engine(storage, lookback_s=cfg.query_lookback_delta, max_points=cfg.query_max_points_per_series)
    out = {}
    try:
        for panel, query in DASHBOARD_QUERIES:
            cpu = []
            for _ in range(repeat):
                ctx = QueryContext(max_samples=cfg.query_max_samples, max_series=cfg.query_max_series,
                                   max_bytes=cfg.query_max_memory_per_query, pool=pool)
                c0 = time.process_time()
                render_charged(engine.range(query, end_s - window_s, end_s, step_s, ctx), ctx)
                cpu.append((time.process_time() - c0) * 1e3)
                ctx.release_all()  # as the API does when a query ends
            out[panel] = {"first_ms": cpu[0], "refresh_ms": statistics.median(cpu[1:]) if repeat > 1 else cpu[0]}
    finally:
        storage.close(flush=False)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="a bench.dataset dir (its servers stopped)")
    ap.add_argument("--copy-to", type=Path, help="copy the metricsgw data there first and read the copy")
    ap.add_argument("--repeat", type=int, default=6)
    args = ap.parse_args(argv)
    malloc.tune()  # before DuckDB's threads start, as the server does
    gcpolicy.tune()  # and the cycle collector's thresholds, as every metricsgw process has them
    end_s = json.loads((args.dir / "dataset.json").read_text())["end_ms"] / 1000
    data = args.dir / "metricsgw" / "data"
    if args.copy_to:
        shutil.rmtree(args.copy_to, ignore_errors=True)
        shutil.copytree(data, args.copy_to, ignore=shutil.ignore_patterns("run"))  # sockets of a running gateway
        data = args.copy_to
    res = measure(data, end_s, args.repeat)
    print("| panel | refresh CPU ms | first run CPU ms |\n|---|---|---|")
    for panel, r in res.items():
        print(f"| {panel} | {r['refresh_ms']:.1f} | {r['first_ms']:.1f} |")
    print(f"| total | {sum(r['refresh_ms'] for r in res.values()):.1f} | {sum(r['first_ms'] for r in res.values()):.1f} |")


if __name__ == "__main__":
    main()
