"""Read side of the storage: series from the series table, samples from Parquet (DuckDB) + head.

Every call takes the query's ``QueryContext``: a DuckDB query registers its connection's
``interrupt`` with it, so a deadline or a client disconnect stops the scan within milliseconds.
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pyarrow as pa

from ..limits.context import QueryContext
from ..model import METRIC_NAME, Matcher
from .batch import SampleBlock, SeriesSet

SELECT_SAMPLES = """
SELECT sid, t, v, file_index
FROM read_parquet($files)
WHERE metric IN (SELECT unnest($metrics))
  AND t BETWEEN $start_ms AND $end_ms
  AND sid IN (SELECT sid FROM wanted_ids)
"""


class StorageReader:
    """Mixed into ``Storage``; uses its catalog, head, flushing snapshots and file list."""

    def _init_reader(self, memory_limit: int, threads: int) -> None:
        self._db = duckdb.connect(config={
            "memory_limit": f"{max(memory_limit // (1 << 20), 64)}MiB",
            "threads": threads,
            "allocator_background_threads": True,  # return memory to the OS after big or interrupted queries
            "temp_directory": os.path.join(self.path, "duckdb_tmp"),
        })

    def _close_reader(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ series
    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None) -> SeriesSet:
        ids: list[np.ndarray] = []
        labels: list = []
        total = 0
        check = ctx.check if ctx else None
        for table, rows in self.catalog.select(matchers, start_ms, end_ms, check):
            if limit is not None and total + len(rows) > limit:
                rows = rows[: limit - total]
            if ctx is not None:
                ctx.charge_series(len(rows), "series selection")
            g = table.gidx.view[rows]
            ids.append(self.catalog.sids.a[g])
            labels.extend(table.labels_at(int(r)) for r in rows)
            total += len(rows)
            if limit is not None and total >= limit:
                break
        return SeriesSet(np.concatenate(ids) if ids else np.empty(0, np.int64), labels)

    def count_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None = None) -> int:
        check = ctx.check if ctx else None
        return sum(len(rows) for _, rows in self.catalog.select(matchers, start_ms, end_ms, check))

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        """Samples a read of these series over the window would load (from time spans and the scrape interval)."""
        if not len(series):
            return 0
        g = self.catalog.dense(series.ids)
        lo = np.maximum(self.catalog.first_ms.a[g], start_ms)
        hi = np.minimum(self.catalog.last_ms.a[g], end_ms)
        span = np.clip(hi - lo, 0, None)
        present = hi >= lo
        return int(np.sum(span / self._interval_ms) + np.count_nonzero(present))

    def label_names(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                    ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        names: set[str] = set()
        check = ctx.check if ctx else None
        for table, rows in self.catalog.select(matchers, start_ms, end_ms, check):
            names.add(METRIC_NAME)
            for n, col in table.columns.items():
                if n in names:
                    continue
                codes = col.codes.view
                r = rows[rows < len(codes)]
                if len(r) and codes[r].any():
                    names.add(n)
        return sorted(names)[:limit] if limit else sorted(names)

    def label_values(self, name: str, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        values: set[str] = set()
        check = ctx.check if ctx else None
        if name == METRIC_NAME:
            for table, _ in self.catalog.select(matchers, start_ms, end_ms, check):
                values.add(table.name)
        else:
            for table, rows in self.catalog.select(matchers, start_ms, end_ms, check):
                col = table.columns.get(name)
                if col is None:
                    continue
                codes = col.codes.view
                r = rows[rows < len(codes)]
                for c in np.unique(codes[r]):
                    if c:
                        values.add(col.values[c])
        out = sorted(values)
        return out[:limit] if limit else out

    def metadata(self, metric: str | None = None, limit: int | None = None) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for name in sorted(self.metadata_by_metric):
            if metric is not None and name != metric:
                continue
            if limit is not None and limit > 0 and len(out) >= limit:
                break
            out[name] = [{"type": m.type, "help": m.help, "unit": m.unit} for m in self.metadata_by_metric[name]]
        return out

    # ------------------------------------------------------------------ samples
    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        """Samples of these series in [start_ms, end_ms], sorted by (sid, t), one per (sid, t).

        Charges ``ctx`` for every sample as it is loaded (callers must not charge them again)."""
        ids_sorted = np.unique(np.asarray(ids, np.int64))
        if not len(ids_sorted):
            return SampleBlock.empty()
        parts: list[SampleBlock] = []
        ranks: list[np.ndarray] = []  # write order of each sample's source, so the first-written duplicate wins
        with self._swap_lock:  # a consistent view: files + snapshots being flushed + head
            files = sorted((f for f in self.files if f.max_t >= start_ms and f.min_t <= end_ms), key=lambda f: f.seq)
            heads = list(self.flushing) + [self.head]
        if files:
            block, file_index = self._read_parquet([f.path for f in files], ids_sorted, start_ms, end_ms, ctx)
            parts.append(block)
            ranks.append(file_index)
        for h in heads:
            for block in h.select(ids_sorted, start_ms, end_ms):
                ctx.charge_samples(len(block), "head read")
                parts.append(block)
                ranks.append(np.full(len(block), len(files) + len(ranks), np.int64))
        ctx.check("sample merge")
        if not any(len(p) for p in parts):
            return SampleBlock.empty()
        sid = np.concatenate([p.sid for p in parts])
        t = np.concatenate([p.t for p in parts])
        v = np.concatenate([p.v for p in parts])
        order = np.lexsort((np.concatenate(ranks), t, sid))
        sid, t, v = sid[order], t[order], v[order]
        keep = np.r_[True, (sid[1:] != sid[:-1]) | (t[1:] != t[:-1])]
        if not keep.all():
            sid, t, v = sid[keep], t[keep], v[keep]
        return SampleBlock(sid, t, v)

    def _read_parquet(self, files: list[str], ids_sorted: np.ndarray, start_ms: int, end_ms: int,
                      ctx: QueryContext) -> tuple[SampleBlock, np.ndarray]:
        ctx.check("parquet read")
        g = self.catalog.dense(ids_sorted)
        metrics = self.catalog.metric_names_of(g)
        con = self._db.cursor()
        ctx.add_interrupter(con.interrupt)
        try:
            con.register("wanted_ids", pa.table({"sid": ids_sorted}))
            rel = con.sql(SELECT_SAMPLES, params={"files": files, "metrics": metrics,
                                                  "start_ms": start_ms, "end_ms": end_ms})
            chunks = []
            reader = rel.to_arrow_reader(1 << 20)
            for rb in reader:
                ctx.charge_samples(rb.num_rows, "parquet read")
                chunks.append(rb)
            ctx.check("parquet read")
        except duckdb.InterruptException:
            ctx.check("parquet read")
            raise
        finally:
            ctx.remove_interrupter(con.interrupt)
            con.close()
        if not chunks:
            return SampleBlock.empty(), np.empty(0, np.int64)
        tb = pa.Table.from_batches(chunks)
        return (SampleBlock(tb.column("sid").to_numpy(), tb.column("t").to_numpy(), tb.column("v").to_numpy()),
                tb.column("file_index").to_numpy().astype(np.int64))
