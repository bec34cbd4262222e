"""Time and memory of one partition compaction: `python -m bench.compaction --series 2000000 --files 16 --metrics 1`.

Storage in this process; ``--files`` flushes of one sample per series (``--series`` series over ``--metrics``
metrics) into a closed hour, then one ``compact_partitions`` pass merges them: wall and CPU seconds, and the
peak RSS above what the process held before (sampled every 50 ms). Few metrics over many series is the shape
that costs memory when a metric is merged whole (at the seed's 7,500 nodes, 750,000 iptables series of one
metric). The script imports only ``metricsgw``, so an export of an older commit on PYTHONPATH measures that
commit the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time

import numpy as np
import psutil

from metricsgw.model import canonical, series_id
from metricsgw.storage.upkeep import compact
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.store import Storage

HOUR_MS = 3600_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--metrics", type=int, default=2)
    a = ap.parse_args()
    labels = [canonical([("__name__", f"m{i % a.metrics}"), ("node", f"node-{i // 300}"), ("i", str(i))])
              for i in range(a.series)]
    sids = np.array([series_id(lb) for lb in labels], np.int64)
    t0 = (int(time.time() * 1000) // HOUR_MS - 1) * HOUR_MS  # the hour before this one: closed
    with tempfile.TemporaryDirectory() as d:
        st = Storage(d, flush_interval_s=1e9, flush_max_samples=10**10)
        st.open()
        try:
            merge, compact.compact_partitions = compact.compact_partitions, lambda *_a, **_k: 0
            try:  # flushes only: the pass below is the one measured
                for r in range(a.files):
                    new = list(zip(sids.tolist(), labels)) if r == 0 else []
                    asyncio.run(st.append(AppendBatch(new_series=new, sid=sids, t=np.full(a.series, t0 + r * 15_000),
                                                      v=np.full(a.series, float(r)))))
                    st.flush()
            finally:
                compact.compact_partitions = merge
            proc = psutil.Process()
            base = proc.memory_info().rss
            peak, stop = [base], threading.Event()

            def sample() -> None:
                while not stop.wait(0.05):
                    peak[0] = max(peak[0], proc.memory_info().rss)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            wall, cpu = time.perf_counter(), time.process_time()
            done = compact.compact_partitions(st)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            stop.set()
            sampler.join()
        finally:
            st.close(flush=False)
    samples = a.series * a.files
    print(f"{a.files} files x {a.series:,} series in {a.metrics} metric(s) ({samples:,} samples): {done} partition(s) "
          f"compacted in {wall:.1f} s ({cpu:.1f} s CPU); RSS +{(peak[0] - base) / 2**20:,.0f} MiB at peak "
          f"over {base / 2**20:,.0f} MiB")


if __name__ == "__main__":
    main()
