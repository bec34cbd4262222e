"""Sample reads of the storage: Parquet (DuckDB) + the heads. Series reads are in series.py.

Every call takes the query's ``QueryContext``: a DuckDB query registers its connection's
``interrupt`` with it, so a deadline or a client disconnect stops the scan within milliseconds.
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa

from ... import npsort
from ...limits.context import QueryContext
from ...model import SampleBlock
from ..batch import SeriesSet
from ..catalog.archive import Archive
from ..catalog.book import CatalogBook
from ..fileset import FileSet
from ..memory.head import select_sorted
from .merge import merge_blocks, merge_parts, sort_block
from .plan import MetricRead, ReadPlan, Way, plan_read
from .sample_cache import CachedSamples, SampleCache

# Selective reads: only the wanted series (a join with the unique wanted sids, faster here
# than the equivalent IN-subquery), metric names bound one per parameter so the Parquet scan
# can prune row groups by the metric column's statistics.
SELECT_SAMPLES = """
SELECT p.sid, p.t, p.v, p.file_index
FROM read_parquet($files) AS p
JOIN wanted_ids AS w ON p.sid = w.sid
WHERE p.metric IN ({metric_params})
  AND p.t BETWEEN $start_ms AND $end_ms
  AND p.sid BETWEEN $sid_lo AND $sid_hi
"""

# Reads for the per-file sample cache: all of a file's samples of one metric (or of the
# wanted series of it), whatever the query window.
SELECT_METRIC = """
SELECT sid, t, v, file_index
FROM read_parquet($files)
WHERE metric = $metric
"""
# Most of a metric's series in the wanted ids' range (the metric nearly whole, or a batch of adjacent ids): the
# range's rows in the window, no join. Each file's rows come back in file order, i.e. already sorted by (sid, t).
SELECT_METRIC_WINDOW = """
SELECT sid, t, v, file_index
FROM read_parquet($files)
WHERE metric = $metric AND t BETWEEN $start_ms AND $end_ms
  AND sid BETWEEN $sid_lo AND $sid_hi
"""
# The wanted ids' range bound too, so a scan reads only the row groups holding them (the files are sorted by metric
# and id): a query evaluated in batches of adjacent ids (promql/batching.py) reads each row group about once.
SELECT_METRIC_SERIES = """
SELECT p.sid, p.t, p.v, p.file_index
FROM read_parquet($files) AS p
JOIN wanted_ids AS w ON p.sid = w.sid
WHERE p.metric = $metric
  AND p.sid BETWEEN $sid_lo AND $sid_hi
"""

def _metric_sql(metrics: list[str]) -> tuple[str, dict]:
    params = {f"m{i}": m for i, m in enumerate(metrics)}
    return SELECT_SAMPLES.format(metric_params=", ".join(f"$m{i}" for i in range(len(metrics)))), params


class SampleQuerier:
    """Float sample reads: Parquet files through DuckDB (with a cache of decoded samples) and the file set's heads.

    Sample reads pin the table snapshot they read, so compaction and retention delete none of its files
    meanwhile; they take ``book.catalog`` once per call (retention may replace it)."""

    def __init__(self, path: str, files: FileSet, book: CatalogBook, archive: Archive, memory_limit: int,
                 cache_bytes: int, threads: int) -> None:
        self.files = files
        self.book = book
        self.archive = archive  # the series the head window forgot, for reads reaching back before it
        self._interval_ms = 15_000.0  # the median scrape interval flushes saw: sizes estimates and cache fills
        self._db = duckdb.connect(config={
            "memory_limit": f"{max(memory_limit // (1 << 20), 64)}MiB",
            "threads": threads,
            "allocator_background_threads": True,  # return memory to the OS after big or interrupted queries
            # DuckDB's allocator keeps freed memory per thread up to these before returning it;
            # its defaults (128 MiB, 512 MiB) would sit on a good part of its --query.max-memory share
            "allocator_flush_threshold": "32MiB",
            "allocator_bulk_deallocation_flush_threshold": "64MiB",
            "temp_directory": os.path.join(path, "duckdb_tmp"),
        })
        # Files are immutable: parse footers once. GLOBAL: every read runs on a cursor of its own, and a plain SET
        # holds for this connection's session only (a compacted hour's footer is ~0.5 MB, parsed at each read).
        self._db.execute("SET GLOBAL parquet_metadata_cache = true")
        # Decoded samples of recently read (file, metric) pairs: dashboards re-read the same
        # metrics every refresh, and a cached read is a binary search instead of a Parquet scan.
        self._sample_cache = SampleCache(cache_bytes)
        self._cache_version = 0  # the newest table snapshot generation the sample cache was trimmed to

    def close(self) -> None:
        self._db.close()

    def duckdb_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the storage's DuckDB (its memory limit and threads), for side-table merges."""
        return self._db.cursor()

    def sample_cache_stats(self) -> tuple[int, int, set[str]]:
        """(entries, bytes, files they come from) of the sample cache."""
        return self._sample_cache.stats()

    def duckdb_memory(self) -> int:
        """Bytes DuckDB says it holds (its buffer pool, Parquet footers, allocator caches)."""
        row = self._db.cursor().execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()
        return int(row[0] or 0)

    def learn_interval(self, sid: np.ndarray, t: np.ndarray) -> None:
        """Take the median scrape interval of a flushed head's columns (sorted by (sid, t)) as the estimate."""
        same = sid[1:] == sid[:-1]
        gaps = (t[1:] - t[:-1])[same]
        gaps = gaps[gaps > 0]
        if len(gaps):
            self._interval_ms = float(np.median(gaps))

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        """Samples a read of these series over the window would load (from time spans and the scrape interval)."""
        if not len(series):
            return 0
        first, last = self._spans(series.ids, start_ms)
        lo = np.maximum(first, start_ms)
        hi = np.minimum(last, end_ms)
        span = np.clip(hi - lo, 0, None)
        present = hi >= lo
        return int(np.sum(span / self._interval_ms) + np.count_nonzero(present))

    def _spans(self, ids: np.ndarray, start_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """Each series' (first, last) sample time; a series retention dropped since it was selected has nothing left
        to read and is left out. With the archive (the window reaches back before the head window), a series in both
        spans both: one forgotten and written again starts in memory at its return."""
        cat = self.book.catalog
        g = cat.lookup(ids)
        first = np.where(g >= 0, cat.first_ms.a[g], np.iinfo(np.int64).max)
        last = np.where(g >= 0, cat.last_ms.a[g], np.iinfo(np.int64).min)
        old = self.archive.spans_of(ids, start_ms)
        if old is not None:
            found, old_first, old_last = old
            first[found] = np.minimum(first[found], old_first[found])
            last[found] = np.maximum(last[found], old_last[found])
        held = (g >= 0) | (last != np.iinfo(np.int64).min)
        return first[held], last[held]

    def _metrics_of(self, cat, ids: np.ndarray, start_ms: int, ctx: QueryContext) -> tuple[np.ndarray, np.ndarray,
                                                                                            list]:
        """(the ids a catalog holds, the index of each one's metric in the list, the list): the catalog's, and for
        ids only the archive holds (forgotten by the head window), the archive's metrics after them."""
        g = cat.lookup(ids)
        known = g >= 0  # retention may have dropped a series since it was selected
        metric_of = cat.metric_idx.a[g]
        metrics = list(cat.tables)
        miss = np.flatnonzero(~known)
        archive = self.archive.catalog_of(ids[miss], start_ms, ctx) if len(miss) else None
        if archive is not None:
            ga = archive.lookup(ids[miss])
            found = ga >= 0
            at = {}
            for ti in npsort.unique(archive.metric_idx.a[ga[found]]).tolist():
                table = archive.tables[ti]
                mine = cat.metrics.get(table.name)
                at[ti] = mine.index if mine is not None else len(metrics)
                if mine is None:
                    metrics.append(table)
            metric_of[miss[found]] = [at[ti] for ti in archive.metric_idx.a[ga[found]].tolist()]
            known[miss[found]] = True
        return ids[known], metric_of[known], metrics

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        """Samples of these series in [start_ms, end_ms], sorted by (sid, t), one per (sid, t).

        Charges ``ctx`` for every sample as it is loaded (callers must not charge them again)."""
        ids_sorted = npsort.unique(np.asarray(ids, np.int64))
        if not len(ids_sorted):
            return SampleBlock.empty()
        parts: list[SampleBlock] = []  # in write order, so the first-written duplicate wins
        with self.files.atomically():  # a consistent view: files + snapshots being flushed + head
            view = self.files.view()
            cat = self.book.catalog
        with view.pin as snap:
            wanted, metric_of, metrics = self._metrics_of(cat, ids_sorted, start_ms, ctx)
            plan = plan_read(wanted, metric_of, metrics, start_ms, end_ms,
                             files=snap.samples, heads=[(h.min_t, h.max_t) for h in view.heads],
                             snapshot_version=snap.version, cache_version=self._cache_version,
                             cache=self._sample_cache, cache_max_bytes=self._sample_cache.max_bytes,
                             interval_ms=self._interval_ms, scan_series=ctx.scan_series)
            if plan.trim_cache_to is not None:  # entries of retired files go
                self._cache_version = snap.version
                self._sample_cache.retain(plan.trim_cache_to)
            if plan.metrics:
                parts.extend(self._read_files(plan, start_ms, end_ms, ctx))
        for i in plan.heads:
            for block in view.heads[i].select(ids_sorted, start_ms, end_ms):
                ctx.charge_loaded(len(block), "head read")
                parts.append(block)
        ctx.check("sample merge")
        return merge_parts(ids_sorted, [p for p in parts if len(p)], start_ms, end_ms)

    def _read_files(self, plan: ReadPlan, start_ms: int, end_ms: int, ctx: QueryContext) -> list[SampleBlock]:
        """Blocks, each sorted by (sid, t), in write order for any one series: a block of the
        metrics served merged across the files, then one block per file (in ``plan.files`` order)."""
        paths = list(plan.files)
        per_file: list[list[SampleBlock]] = [[] for _ in paths]
        all_files: list[SampleBlock] = []  # metrics served merged across the files
        joined: list[MetricRead] = []
        for r in plan.metrics:
            ctx.check("parquet read")  # a read served from the cache has no DuckDB call to interrupt
            way = r.way
            # A fill holds the whole of it for a moment: only when the query's budgets allow now
            # (what this call read before is charged already).
            if r.fallback is not None and not ctx.can_hold(r.fill_samples):
                way = r.fallback
            if way is Way.WINDOW:
                self._read_metric_window(paths, r.metric, r.ids, start_ms, end_ms, ctx, per_file)
                continue
            if way is Way.JOIN:
                joined.append(r)
                continue
            mark = ctx.mark()
            blocks, fresh = self._metric_blocks(paths, r.metric, r.key, None if r.whole else r.ids, ctx)
            if fresh:  # fresh files were charged row by row as DuckDB returned them; what they read
                # now belongs to the cache (its own share of --query.max-memory), and the query
                # holds only what it selects from them
                ctx.release_to(mark)
            # The files' blocks merged once and cached too (until the snapshot changes), so a
            # dashboard refresh is one binary search, not a merge. Merged on the read that fills
            # the files' blocks, not on the next one: that read pays for the Parquet scan anyway,
            # and the first refresh is then as fast as the others (bench.queries took the median
            # of five runs of a heavy panel from the second or third run while it was not).
            sel = self._merged_block(paths, r.metric, r.key, blocks).select(r.ids, start_ms, end_ms)
            ctx.charge_loaded(len(sel), "parquet read (cached)")
            all_files.append(sel)
        if joined:  # one query for every metric read by a join
            wanted = np.sort(np.concatenate([r.ids for r in joined]))
            metrics = sorted({r.metric for r in joined})
            block, file_index = self._read_parquet(paths, metrics, wanted, start_ms, end_ms, ctx)
            for i, b in enumerate(_split_by_file(block, file_index, len(paths))):
                per_file[i].append(b)
        out = []
        # Blocks of different metrics hold different series, so where they go in the write order
        # does not matter; a metric's blocks of each file stay in file order.
        for bs in [all_files] + per_file:
            bs = [b for b in bs if len(b)]
            if len(bs) == 1:
                out.append(bs[0])
            elif bs:  # several metrics in one file: different sids, so a sort restores (sid, t)
                out.append(sort_block(SampleBlock(*(np.concatenate(c) for c in zip(*((b.sid, b.t, b.v) for b in bs))))))
        return out

    def _read_metric_window(self, paths: list[str], metric: str, ids_m: np.ndarray, start_ms: int, end_ms: int,
                            ctx: QueryContext, per_file: list[list[SampleBlock]]) -> None:
        """A metric's rows in the window and the wanted ids' range (a scan with no join), then the wanted series of
        them."""
        tb = self._query(SELECT_METRIC_WINDOW, {"files": paths, "metric": metric, "start_ms": start_ms,
                                                 "end_ms": end_ms, "sid_lo": int(ids_m[0]), "sid_hi": int(ids_m[-1])},
                         ctx)
        block, file_index = _block_of(tb)
        for i, b in enumerate(_split_by_file(block, file_index, len(paths))):
            b = sort_block(b)  # a no-op check: DuckDB keeps each file's row order
            per_file[i].append(select_sorted(b.sid, b.t, b.v, ids_m, start_ms, end_ms))

    def _merged_block(self, paths: list[str], metric: str, key: str, blocks: list[CachedSamples]) -> CachedSamples:
        if len(blocks) == 1:
            return blocks[0]
        mkey = (tuple(paths), metric, key)
        b = self._sample_cache.get(mkey)
        if b is None:
            b = CachedSamples.of(merge_blocks([c.block() for c in blocks]))
            self._sample_cache.put(mkey, b)
        return b

    def _metric_blocks(self, paths: list[str], metric: str, key: str, ids: np.ndarray | None,
                       ctx: QueryContext) -> tuple[list[CachedSamples], set[int]]:
        """Samples of ``metric`` (all series, or just ``ids``) in each file, from the cache or
        read (and cached) now; plus the positions of the files read now."""
        blocks: list[CachedSamples | None] = [self._sample_cache.get((p, metric, key)) for p in paths]
        missing = [i for i, b in enumerate(blocks) if b is None]
        if missing:
            params = {"files": [paths[i] for i in missing], "metric": metric}
            if ids is None:
                tb = self._query(SELECT_METRIC, params, ctx)
            else:
                tb = self._query(SELECT_METRIC_SERIES, params | {"sid_lo": int(ids[0]), "sid_hi": int(ids[-1])}, ctx,
                                 pa.table({"sid": ids}))
            block, file_index = _block_of(tb)
            for j, b in enumerate(_split_by_file(block, file_index, len(missing))):
                c = CachedSamples.of(sort_block(b))
                self._sample_cache.put((paths[missing[j]], metric, key), c)
                blocks[missing[j]] = c
        return blocks, set(missing)  # type: ignore[return-value]

    def _read_parquet(self, files: list[str], metrics: list[str], ids_sorted: np.ndarray, start_ms: int,
                      end_ms: int, ctx: QueryContext) -> tuple[SampleBlock, np.ndarray]:
        sql, params = _metric_sql(metrics)
        params |= {"files": files, "start_ms": start_ms, "end_ms": end_ms,
                   "sid_lo": int(ids_sorted[0]), "sid_hi": int(ids_sorted[-1])}
        tb = self._query(sql, params, ctx, pa.table({"sid": ids_sorted}))
        return _block_of(tb)

    def _query(self, sql: str, params: dict, ctx: QueryContext, wanted: pa.Table | None = None) -> pa.Table | None:
        """Run one read on its own cursor (so ``interrupt`` stops only it), charging rows as they arrive."""
        ctx.check("parquet read")
        con = self._db.cursor()
        ctx.add_interrupter(con.interrupt)
        try:
            if wanted is not None:
                con.register("wanted_ids", wanted)
            chunks = []
            # on an object store, files of other writers may be fetched now (storage/files/copies.py)
            with self.files.table.local_paths(params["files"]) as local:
                for rb in con.sql(sql, params={**params, "files": local}).to_arrow_reader(1 << 20):
                    ctx.charge_loaded(rb.num_rows, "parquet read")
                    chunks.append(rb)
            ctx.check("parquet read")
        except (duckdb.InterruptException, OSError):
            # An interrupt (deadline or client gone) surfaces as InterruptException, or as
            # pyarrow's OSError("INTERRUPT Error") when it lands while batches are streamed.
            ctx.check("parquet read")
            raise
        finally:
            ctx.remove_interrupter(con.interrupt)
            con.close()
        return pa.Table.from_batches(chunks) if chunks else None


def _block_of(tb: pa.Table | None) -> tuple[SampleBlock, np.ndarray]:
    if tb is None or tb.num_rows == 0:
        return SampleBlock.empty(), np.empty(0, np.int64)
    return (SampleBlock(tb.column("sid").to_numpy(), tb.column("t").to_numpy(), tb.column("v").to_numpy()),
            tb.column("file_index").to_numpy().astype(np.int64))


def _split_by_file(block: SampleBlock, file_index: np.ndarray, n_files: int) -> list[SampleBlock]:
    """Per file_index 0..n_files-1, its rows (DuckDB keeps each file's rows together and in order)."""
    if not len(block):
        return [SampleBlock.empty() for _ in range(n_files)]
    if len(file_index) > 1 and not (np.diff(file_index) >= 0).all():
        perm = np.argsort(file_index, kind="stable")
        block, file_index = SampleBlock(block.sid[perm], block.t[perm], block.v[perm]), file_index[perm]
    bounds = np.searchsorted(file_index, np.arange(n_files + 1))
    return [SampleBlock(block.sid[a:b], block.t[a:b], block.v[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
