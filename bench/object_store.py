"""The table on an object store against the table on local disk (issue 34): the read paths, then ingest and queries.

    python -m bench.object_store --series 2000 --samples 600 --repeat 5

Starts moto in server mode (testkit/s3.py) on loopback. Two parts, each a median of ``--repeat`` runs:

1. **Read paths** for the same Parquet files (one flushed table), one DuckDB query over all of them (a group by
   series with a time filter, what a dashboard's range query asks of the files):
   - local: DuckDB's own Parquet reader on local files (the table under --storage.path);
   - arrow dataset: ``pyarrow.dataset`` over ``pyarrow.fs.S3FileSystem``, registered in DuckDB (no httpfs here);
   - fsspec: the same S3FileSystem wrapped for fsspec and registered in DuckDB (``read_parquet('s3://...')``);
   - fetch, then local: download every file (8 at once), then DuckDB's reader: what the gateway does when it meets
     a file it has no copy of; afterwards every read is the local one.
2. **The gateway's storage**, local table vs table on the store: ingest (appends + the flush that commits them, the
   upload included), a query of every series (the gateway's read path), a storage opened on an empty directory
   (a new host) reading the table, and the query again with ``--storage.s3.cache-size`` too small to keep a copy
   (every read fetches the files its plan needs).

Ratios are to local. The table prints; ``--results`` appends it to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher, canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.files.object_store import ObjectStore, S3Settings
from metricsgw.storage.store import Storage
from testkit.s3 import ACCESS_KEY, REGION, SECRET_KEY, MotoServer

T0 = 1_796_400_000_000
QUERY = "SELECT sid, count(*) AS n, sum(v) AS s FROM {src} WHERE t >= {lo} AND t < {hi} GROUP BY sid"


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _batches(series: int, samples: int, step_ms: int = 15_000, per_batch: int = 20):
    labels = [canonical([("__name__", "bench_metric"), ("i", str(i))]) for i in range(series)]
    sids = np.array([series_id(lb) for lb in labels], np.int64)
    new = list(zip(sids.tolist(), labels))
    for k in range(0, samples, per_batch):
        ts = T0 + np.arange(k, min(k + per_batch, samples), dtype=np.int64) * step_ms
        yield AppendBatch(new_series=new if k == 0 else [], sid=np.repeat(sids, len(ts)),
                          t=np.tile(ts, series), v=np.random.default_rng(k).random(series * len(ts)))


def _storage(path: Path, store: ObjectStore | None, writer: str = "gw0") -> Storage:
    st = Storage(str(path), writer_id=writer, table_store=store, partition_ms=3600_000 * 24,
                 sample_cache_bytes=0)  # every query reads the files: what is measured
    st.open()
    return st


def _ingest(st: Storage, series: int, samples: int) -> None:
    for b in _batches(series, samples):
        asyncio.run(st.append(b))
    st.flush()


def _query(st: Storage) -> int:
    ss = st.select_series([Matcher("__name__", "=", "bench_metric")], None, None, QueryContext())
    return len(st.read_samples(ss.ids, T0, T0 + 10**10, QueryContext()).t)


def read_paths(moto: MotoServer, files: list[str], root: str, repeat: int) -> dict[str, float]:
    bucket = moto.bucket("read-paths")
    client = moto.client()
    keys = [os.path.relpath(f, root) for f in files]
    for f, k in zip(files, keys):
        client.upload_file(f, bucket, k)
    lo, hi = T0, T0 + 10**10
    con = duckdb.connect()
    s3 = pafs.S3FileSystem(endpoint_override=moto.endpoint, scheme="http", access_key=ACCESS_KEY,
                           secret_key=SECRET_KEY, region=REGION)
    out = {"local": _median(lambda: con.execute(QUERY.format(src=f"read_parquet({files!r})", lo=lo, hi=hi))
                            .fetchall(), repeat)}

    def arrow_dataset():
        ds = pads.dataset([f"{bucket}/{k}" for k in keys], filesystem=s3, format="parquet")
        con.register("ds", ds)
        con.execute(QUERY.format(src="ds", lo=lo, hi=hi)).fetchall()
        con.unregister("ds")

    out["arrow dataset"] = _median(arrow_dataset, repeat)
    try:
        from fsspec.implementations.arrow import ArrowFSWrapper

        con.register_filesystem(ArrowFSWrapper(s3))
        urls = [f"s3://{bucket}/{k}" for k in keys]
        out["fsspec"] = _median(lambda: con.execute(QUERY.format(src=f"read_parquet({urls!r})", lo=lo, hi=hi))
                                .fetchall(), repeat)
    except ImportError:  # the bench extra's; the gateway does not use it
        pass

    def fetch_then_local():
        with tempfile.TemporaryDirectory() as d:
            local = [os.path.join(d, k.replace("/", "_")) for k in keys]
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda kl: client.download_file(bucket, kl[0], kl[1]), zip(keys, local)))
            con.execute(QUERY.format(src=f"read_parquet({local!r})", lo=lo, hi=hi)).fetchall()

    out["fetch, then local"] = _median(fetch_then_local, repeat)
    return out


def gateway(moto: MotoServer, work: Path, series: int, samples: int, repeat: int) -> dict[str, tuple[float, float]]:
    """{what: (local s, store s)}"""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    bucket = moto.bucket("gateway")
    out: dict[str, list[float]] = {"ingest + flush": [], "query of every series": [], "open on an empty directory + "
                                   "the first query": [], "query of every series, --storage.s3.cache-size=1 "
                                   "(fetched at every read)": []}
    for r in range(repeat):
        row = []
        def store(prefix: str = f"run{r}", cache_bytes: int = 0) -> ObjectStore:  # a table per run, as locally
            return ObjectStore(S3Settings(f"s3://{bucket}/{prefix}", moto.endpoint, REGION, force_path_style=True,
                                          cache_bytes=cache_bytes))

        for side, mk in (("local", lambda: None), ("store", store)):
            d = work / f"{side}-{r}"
            st = _storage(d / "a", mk(), f"gw{r}")
            t = time.perf_counter()
            _ingest(st, series, samples)
            ingest = time.perf_counter() - t
            n = _query(st)
            query = _median(lambda: _query(st), 3)
            st.close()
            t = time.perf_counter()
            # a new host: local mode shares the directory (as gateways on one disk), the store mode starts empty
            other = _storage(d / "a" if side == "local" else d / "b", mk(), f"reader{r}")
            assert _query(other) == n == series * samples, (n, series * samples)
            cold = time.perf_counter() - t
            other.close()
            if side == "local":
                on_demand = query  # the same read with every file here
            else:  # a budget too small to keep a copy: every read fetches the files it needs
                other = _storage(d / "c", store(f"run{r}", cache_bytes=1), f"lazy{r}")
                on_demand = _median(lambda: _query(other), 3)
                other.close()
            row.append((ingest, query, cold, on_demand))
        for i, what in enumerate(out):
            out[what].append((row[0][i], row[1][i]))
    return {w: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for w, v in out.items()}


def report(args, paths: dict[str, float], gw: dict[str, tuple[float, float]]) -> str:
    lines = [f"## Object store: `python -m bench.object_store --series {args.series} --samples {args.samples} "
             f"--repeat {args.repeat}`", "",
             f"**{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, issue 34**: moto in server mode on loopback, "
             f"{args.series * args.samples:,} samples ({args.series:,} series x {args.samples}), medians of "
             f"{args.repeat}; the 2 cores shared with other work, so read the ratios.", "",
             "| read path (one DuckDB group by over the table's files) | s | x local |", "|---|---|---|"]
    base = paths["local"]
    lines += [f"| {k} | {v:.3f} | {v / base:.2f} |" for k, v in paths.items()]
    lines += ["", "| the gateway's storage | local s | store s | store / local |", "|---|---|---|---|"]
    lines += [f"| {k} | {a:.3f} | {b:.3f} | {b / a:.2f} |" for k, (a, b) in gw.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=600, help="samples per series")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--results", action="store_true", help="append the table to bench/RESULTS.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        moto = MotoServer(work)
        try:
            st = _storage(work / "paths", None)
            _ingest(st, args.series, args.samples)
            files = [f.path for f in st.table.current.samples]
            paths = read_paths(moto, files, str(work / "paths"), args.repeat)
            st.close()
            gw = gateway(moto, work, args.series, args.samples, args.repeat)
        finally:
            moto.stop()
    text = report(args, paths, gw)
    print(text)
    if args.results:
        with open(Path(__file__).with_name("RESULTS.md"), "a", encoding="utf-8") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
