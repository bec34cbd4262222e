"""Pod churn under a short retention: `python -m bench.churn [--pods 2000] [--generations 30]`.

Storage (in this process, with a clock the run moves: by default one generation of pods a minute, each pod
living two generations, 1-minute partitions, 3-minute retention) ingests through the real remote-write
decoding and ingest pipeline, flushes every two scrapes and runs the flusher's maintenance. It
prints, per few generations, the series ever seen, the series the storage holds in memory (what
/api/v1/status/tsdb counts), and the process RSS: memory should follow the series written lately, not
history. Indicative figures (RSS depends on the allocator and on what else the machine does); the
assertions live in tests/storage/upkeep/test_churn.py and test_head_window.py.

Issue 35's churn (20,000 new series every 20 s, 120 s retention, hour partitions):
`python -m bench.churn --pods 4000 --lifetime 1 --generation-seconds 20 --scrape-seconds 10 --retention 120
--partition-minutes 60 --generations 24`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import psutil

from metricsgw.config import load
from metricsgw.ingest.pipeline import IngestPipeline
from metricsgw.limits.context import QueryContext
from metricsgw.limits.ingest import IngestLimits
from metricsgw.malloc import release_free_memory
from metricsgw.model import Matcher
from metricsgw.remote import codec
from metricsgw.storage.store import Storage
from metricsgw.telemetry import Telemetry

MINUTE = 60_000
METRICS = ("container_cpu_seconds_total", "container_memory_bytes", "container_network_rx_bytes_total",
           "kube_pod_info", "kube_pod_status_ready")


def scrape(gens: list[int], pods: int, t_ms: int) -> bytes:
    series = [([("__name__", m), ("namespace", f"ns{i % 20}"), ("pod", f"worker-{g}-{i}"), ("node", f"n{i % 500}")],
               [(t_ms, float(i))]) for g in gens for i in range(pods) for m in METRICS]
    return codec.encode_v1(series, compress=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=2000, help="pods per generation (5 series each)")
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--lifetime", type=int, default=2, help="generations a pod lives")
    ap.add_argument("--generation-seconds", type=int, default=60, help="a new generation of pods this often")
    ap.add_argument("--scrape-seconds", type=int, default=15, help="scrape interval (a flush every two scrapes)")
    ap.add_argument("--retention", type=int, default=180, help="--storage.retention.time, seconds")
    ap.add_argument("--partition-minutes", type=int, default=1, help="--storage.partition-duration, minutes")
    ap.add_argument("--head-window", type=int, default=None, help="--storage.head-window, seconds (default: its own)")
    a = ap.parse_args()
    proc = psutil.Process()
    scrapes = max(a.generation_seconds // a.scrape_seconds, 1)
    start_ms = (int(time.time() * 1000) // MINUTE * MINUTE - 2 * a.generations * a.generation_seconds * 1000)
    now = [start_ms / 1000]
    window = {} if a.head_window is None else {"head_window_ms": a.head_window * 1000}
    rss: list[float] = []
    with tempfile.TemporaryDirectory(prefix="metricsgw-churn-") as d:
        st = Storage(d, partition_ms=a.partition_minutes * MINUTE, retention_ms=a.retention * 1000,
                     clock=lambda: now[0], **window)
        st.open()
        pipe = IngestPipeline(st, Telemetry(), limits=IngestLimits(load({"ingest.max-series-per-metric": "10000000"})))
        ever = 0  # a count, not a set: the run's own memory must not grow with history either
        t_ms = start_ms
        print("| generation | series ever seen | series held | pipeline cache | RSS MiB |\n|---|---|---|---|---|")
        for gen in range(a.generations):
            for k in range(scrapes):
                t_ms += a.scrape_seconds * 1000
                now[0] = t_ms / 1000
                alive = [g for g in range(gen - a.lifetime + 1, gen + 1) if g >= 0]
                batch, _ = pipe.process(codec.decode_v1(scrape(alive, a.pods, t_ms)))
                asyncio.run(st.append(batch))
                pipe.confirm(batch)  # as the write handler does: the new series are known from now on
                ever += len(batch.new_series)
                if k % 2:
                    st.flush()
                    st.maintenance.run()
                    st.table.collect()
                    release_free_memory()
            live = st.select_series([Matcher("__name__", "=", METRICS[0])], t_ms - MINUTE, t_ms, QueryContext())
            st.read_samples(live.ids, t_ms - 5 * MINUTE, t_ms, QueryContext())
            rss.append(proc.memory_info().rss / 2**20)
            if gen % 3 == 2 or gen == a.generations - 1:
                print(f"| {gen + 1} | {ever:,} | {len(st.catalog):,} | {pipe.cache_size:,} | {rss[-1]:.0f} |",
                      flush=True)
        half = rss[len(rss) // 2 - 1] if len(rss) > 1 else rss[0]
        print(f"RSS over the second half: {half:.0f} -> {rss[-1]:.0f} MiB ({rss[-1] - half:+.0f} MiB)")
        st.close()


if __name__ == "__main__":
    main()
