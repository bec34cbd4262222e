"""Cost of one flush (Parquet files + the commit that publishes them): `python -m bench.flush`.

Storage in this process; each round appends one sample to each of ``--series`` series (all new in the
first round) and flushes, ``--rounds`` times, then closes and opens the directory again. Prints the
median and max flush wall time, the share of it spent committing (the table: Delta log entries for
samples, series and spans; before issue 10: the file set's in-memory swap plus flushed.json), and the
open time. The script imports only ``metricsgw``, so an export of an older commit on PYTHONPATH
(``PYTHONPATH=/tmp/old python bench/flush.py``) measures that commit the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import numpy as np

from metricsgw.model import canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.store import Storage


def _commit_timer():
    """Wraps whatever publishes a flush's files (Transaction.commit), accumulating its time."""
    spent = [0.0]
    try:
        from metricsgw.storage.files import table as mod
    except ImportError:  # before the table
        from metricsgw.storage import fileset as mod
    original = mod.Transaction.commit

    def timed(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return original(self, *a, **kw)
        finally:
            spent[0] += time.perf_counter() - t0

    mod.Transaction.commit = timed
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    spent = _commit_timer()
    labels = [canonical([("__name__", f"m{i % 50}"), ("i", str(i))]) for i in range(a.series)]
    sids = np.array([series_id(lb) for lb in labels], np.int64)
    t0_ms = int(time.time() * 1000) - 3600_000
    with tempfile.TemporaryDirectory() as d:
        st = Storage(d, flush_interval_s=1e9)
        st.open()
        flush_s, commit_s = [], []
        for r in range(a.rounds):
            new = list(zip(sids.tolist(), labels)) if r == 0 else []
            asyncio.run(st.append(AppendBatch(new_series=new, sid=sids, t=np.full(len(sids), t0_ms + r * 15_000),
                                              v=np.full(len(sids), float(r)))))
            before = spent[0]
            t0 = time.perf_counter()
            st.flush()
            flush_s.append(time.perf_counter() - t0)
            commit_s.append(spent[0] - before)
        st.close()
        t0 = time.perf_counter()
        st = Storage(d)
        st.open()
        open_s = time.perf_counter() - t0
        st.close(flush=False)
    print(f"{a.series} series, {a.rounds} flushes: flush median {statistics.median(flush_s) * 1000:.1f} ms "
          f"(max {max(flush_s) * 1000:.1f}), commit median {statistics.median(commit_s) * 1000:.1f} ms "
          f"(max {max(commit_s) * 1000:.1f}); open after {a.rounds} flushes {open_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
