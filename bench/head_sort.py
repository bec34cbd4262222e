"""Ingest latency while queries sort the head: `python -m bench.head_sort [--samples 4000000]`.

The event loop appends each write's samples to the head; a query that finds unsorted chunks sorts
them (metricsgw/storage/memory/head.py). This measures how long ``Head.append`` takes -- the time a write
waits on the event loop -- while a query thread keeps sorting, against appends with no query. Run it
with ``PYTHONPATH=<an older checkout>`` to compare another version of the head. Figures depend on the
machine and on what else runs on it; nothing here is a test.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

from metricsgw.storage.memory.head import Head

WRITE_SAMPLES = 2000  # one remote-write request


def _appends(head: Head, n: int, rng: np.random.Generator, series: int) -> list[float]:
    out = []
    t = 0
    for _ in range(n):
        sid = rng.integers(0, series, WRITE_SAMPLES, dtype=np.int64)
        ts = np.full(WRITE_SAMPLES, t, np.int64)
        v = rng.random(WRITE_SAMPLES)
        t0 = time.perf_counter()
        head.append(sid, ts, v)
        out.append(time.perf_counter() - t0)
        t += 1
        time.sleep(0.001)  # writes arrive one after another, not in one burst
    return out


def run(samples: int, appends: int, series: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(1)
    results = {}
    for label, with_query in (("idle", False), ("query sorting", True)):
        head = Head()
        for _ in range(samples // WRITE_SAMPLES):  # a head holding `samples` acknowledged samples
            head.append(rng.integers(0, series, WRITE_SAMPLES, dtype=np.int64), np.zeros(WRITE_SAMPLES, np.int64),
                        rng.random(WRITE_SAMPLES))
        stop = threading.Event()

        def query() -> None:
            wanted = np.arange(0, series, 97, dtype=np.int64)
            while not stop.is_set():
                head.select(wanted, 0, 1 << 40)  # sorts whatever arrived since the last read

        th = threading.Thread(target=query)
        if with_query:
            th.start()
            time.sleep(0.05)
        results[label] = _appends(head, appends, rng, series)
        stop.set()
        if with_query:
            th.join()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=4_000_000, help="samples in the head before the run")
    ap.add_argument("--appends", type=int, default=2000, help="writes of 2,000 samples to time")
    ap.add_argument("--series", type=int, default=500_000)
    a = ap.parse_args()
    print("| head.append | p50 ms | p99 ms | max ms |\n|---|---|---|---|")
    for label, lat in run(a.samples, a.appends, a.series).items():
        ms = sorted(x * 1000 for x in lat)
        print(f"| {label} | {statistics.median(ms):.3f} | {ms[int(0.99 * (len(ms) - 1))]:.3f} | {ms[-1]:.1f} |")


if __name__ == "__main__":
    main()
