"""What a head read costs the process answering it and the one reading it: `python -m bench.head_read`.

A query process reads every ingest shard's recent samples on each query (`?scope=head`, docs/cluster.md), and
the shard answers on the core and GIL its writes use. Here one Storage in this process holds ``--series``
series (committed by a flush, then ``--scrapes`` samples each in memory) and answers two selections (one metric,
a tenth of the series; a regex over a third of them) in remote read's protobuf and in the columnar format
(cluster/head_columns.py): CPU ms of the answer and of the reader's decode, and the answer's bytes. CPU time
(``time.process_time``), not wall time: the figure holds on a busy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import numpy as np

from metricsgw.api import remote_read
from metricsgw.cluster import head_columns, read_client_codec
from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher, canonical, series_id
from metricsgw.remote import read_codec
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.read.recent import RecentView
from metricsgw.storage.store import Storage

METRICS = 30


def _cpu_ms(fn) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn()
    return (time.process_time() - t0) * 1000, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=300_000)
    ap.add_argument("--scrapes", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    labels = [canonical([("__name__", f"m{i % METRICS}"), ("node", f"node-{i // 300}"), ("gpu", str(i % 8)),
                         ("i", str(i))]) for i in range(a.series)]
    sids = np.array([series_id(lb) for lb in labels], np.int64)
    t0 = int(time.time() * 1000) - 600_000
    with tempfile.TemporaryDirectory() as d:
        st = Storage(d, flush_interval_s=1e9, flush_max_samples=10**9)
        st.open()
        try:
            asyncio.run(st.append(AppendBatch(new_series=list(zip(sids.tolist(), labels)), sid=sids,
                                              t=np.full(a.series, t0), v=np.zeros(a.series))))
            st.flush()  # the series are in the table; their recent samples follow in memory
            for r in range(1, a.scrapes + 1):
                asyncio.run(st.append(AppendBatch(sid=sids, t=np.full(a.series, t0 + r * 15_000),
                                                  v=np.full(a.series, float(r)))))
            print(f"{a.series:,} series, {a.scrapes} samples each in memory; CPU ms, median of {a.repeat}")
            print("| selection | series | samples | answer: protobuf | columns | reader decode: protobuf | columns "
                  "| bytes: protobuf (snappy) | columns |")
            print("|---|---|---|---|---|---|---|---|---|")
            for matcher in (Matcher("__name__", "=", "m3"), Matcher("__name__", "=~", "m1.*")):
                _row(st, read_codec.ReadQuery((matcher,), t0 - 1, t0 + 10**7), a.repeat)
        finally:
            st.close(flush=False)


def _row(st: Storage, q: read_codec.ReadQuery, repeat: int) -> None:
    cols: dict[str, list[float]] = {k: [] for k in ("pb", "col", "pb_dec", "col_dec")}
    for _ in range(repeat):
        ms, pb = _cpu_ms(lambda: read_codec.encode_samples_response(
            [remote_read._sampled(RecentView(st), q, QueryContext(), 0)]))
        cols["pb"].append(ms)
        ms, col = _cpu_ms(lambda: head_columns.encode_response([remote_read._columns(RecentView(st), q,
                                                                                      QueryContext(), 0)]))
        cols["col"].append(ms)
        ms, got = _cpu_ms(lambda pb=pb: read_client_codec.decode_response(pb, 1 << 31))
        cols["pb_dec"].append(ms)
        ms, _ = _cpu_ms(lambda col=col: head_columns.decode_response(col))
        cols["col_dec"].append(ms)
    med = {k: statistics.median(v) for k, v in cols.items()}
    m = q.matchers[0]
    print(f"| `{m.name}{m.op}\"{m.value}\"` | {len(got[0].ids):,} | {len(got[0].block):,} | {med['pb']:.0f} | "
          f"{med['col']:.0f} | {med['pb_dec']:.0f} | {med['col_dec']:.0f} | {len(pb):,} | {len(col):,} |")


if __name__ == "__main__":
    main()
