"""Merge the small files frequent flushes leave behind.

A closed partition (its hour is over and the head holds nothing of it) with several files is rewritten as
one file sorted by (metric, sid, t), keeping the first-written sample of exact duplicates. In the open
partition the newest files are merged by size class (``TIER`` files of one class, the newest, become one of
the next): as the hour fills, each sample is rewritten about log_TIER(partition / flush) times, instead of
the whole partition so far at every pass (at the seed's 180k samples/s, 16 flushes ~3 minutes apart, the
partition held ~600M samples by the end of the hour and each pass merged all of them again).

Every file is already sorted by (metric, sid, t), so the merge streams metric by metric in name order, and
within a metric by series: each file's rows are read a row group at a time, and the rows below the smallest
series id some file has not finished are merged in write order and appended to the new file. Time is linear,
and memory holds about a row group per file, not a metric of the partition (at the seed's scale one metric,
750,000 iptables series for an hour, is 180M samples: 4 GiB). The merge runs in the flusher thread and lets
the storage flush between its chunks (``flush_if_due``), so a long merge never holds the head back: the
flush's files take later sequence numbers than the merged file, whose samples are older, so write order holds.
The new file is in place (tmp, fsync, rename) before the old
ones are retired in the same commit (storage/files/table.py deletes them once no running query holds
them): a crash in between leaves duplicates, which reads and the next compaction remove. A failure
leaves no new file (the transaction deletes what it wrote) and is retried at the next pass.
Side tables (series, spans) are merged with DuckDB once they pile up (they are small); retention
rewrites them without the series it dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import crashpoints
from ...model import SampleBlock
from ..files import parquet_io
from ..files.fsync import fsync_dir
from ..read.merge import merge_blocks

log = logging.getLogger(__name__)

TIER = 8  # open partition: this many of the newest files of one size class are merged into one
MAX_FILES_OPEN_PARTITION = 32  # past this many, the open partition is merged whole (sizes that never tier up)
MAX_SIDE_FILES = 16


def _sql_path(path: str) -> str:
    return path.replace("'", "''")


def compact_partitions(storage, row_group_rows: int = parquet_io.SAMPLE_ROW_GROUP_ROWS) -> int:
    """Returns the number of partitions rewritten. Runs in the flush thread (the only one of this process that commits).

    Uses the storage seam only: ``table``, ``writer_id``, ``retention.unflushed_min_t()``, ``partition_ms``,
    ``stopping``, ``flush_if_due()``. Only this writer's files are merged: another writer's are its own to compact
    (no two commits remove one file). Gives up (leaving no file behind) as soon as ``storage.stopping`` is set, so
    shutdown need not wait."""
    table = storage.table
    by_part: dict[int, list[parquet_io.SampleFile]] = defaultdict(list)
    for f in table.current.samples:
        if f.writer == storage.writer_id:
            by_part[f.partition_ms].append(f)
    head_min = storage.retention.unflushed_min_t()
    done = 0
    for part_ms, files in sorted(by_part.items()):
        files = sorted(files, key=lambda f: f.seq)  # write order
        closed = part_ms + storage.partition_ms <= head_min
        if not closed:
            files = _open_run(files)
        if len(files) < 2:
            continue
        with table.transaction() as tx:
            out, seq = tx.new_path("samples", part_ms)
            if not _merge_files([f.path for f in files], out + ".tmp", row_group_rows, storage.stopping,
                                storage.flush_if_due):
                log.info("compaction of partition hour=%d abandoned: shutting down", part_ms)
                return done
            parquet_io.fsync_file(out + ".tmp")
            os.replace(out + ".tmp", out)
            fsync_dir(os.path.dirname(out))
            crashpoints.reached("compaction.merged")
            tx.add_samples(parquet_io.describe_sample_file(out, part_ms, seq, storage.writer_id))
            tx.retire(f.path for f in files)  # deleted once no running query holds them
            tx.commit()
        crashpoints.reached("compaction.swapped")
        done += 1
        log.info("compacted %d files of partition hour=%d into %s", len(files), part_ms, os.path.basename(out))
    return done


def _open_run(files: list[parquet_io.SampleFile]) -> list[parquet_io.SampleFile]:
    """The files of an open partition (in write order) to merge now: the newest run of files of the newest file's
    size class, once there are ``TIER`` of them (a run at the end keeps write order: the merged file's samples
    are newer than every file before it); all of them past ``MAX_FILES_OPEN_PARTITION``; else none."""
    if len(files) >= MAX_FILES_OPEN_PARTITION:
        return files
    classes = [_size_class(f.path) for f in files]
    run = 0
    while run < len(files) and classes[-1 - run] == classes[-1]:
        run += 1
    return files[-run:] if run >= TIER else []


def _size_class(path: str) -> int:
    """floor(log_TIER(bytes)): files within a factor of TIER of each other share a class or are next to each other."""
    size = max(os.path.getsize(path), 1)
    return int(np.log(size) / np.log(TIER))


def _merge_files(paths: list[str], tmp: str, row_group_rows: int, stop: threading.Event, between=None) -> bool:
    """Write the merge of sample files (given in write order) to ``tmp``; False (and no ``tmp``) if ``stop`` was set
    before the last chunk was written. ``between()`` is called after each chunk written (the storage flushes then
    if a flush is due)."""
    with contextlib.ExitStack() as files:
        readers = [_MetricReader(files.enter_context(pq.ParquetFile(p)), p) for p in paths]
        names = sorted(set().union(*(r.rows for r in readers)))
        writer = _SampleWriter(tmp, names, row_group_rows)
        try:
            for code, name in enumerate(names):
                cursors = [_Cursor(r, *r.rows[name]) for r in readers if name in r.rows]
                for block in _merged_chunks(cursors):
                    if stop.is_set():
                        writer.discard()
                        return False
                    writer.append(code, block)
                    if between is not None:
                        between()
            writer.close()
            return True
        except BaseException:
            writer.discard()
            raise


def _merged_chunks(cursors: list[_Cursor]):
    """One metric's rows of every file (cursors in write order), merged, in chunks by series id: each chunk holds the
    rows below the smallest series id a file has read but may not have finished (its last row read so far)."""
    while cursors:
        for c in cursors:
            c.fill()
        open_ends = [c.last_sid for c in cursors if not c.read_all]
        frontier = min(open_ends) if open_ends else None  # None: every file read to its end
        parts = [c.take_below(frontier) for c in cursors]
        parts = [p for p in parts if len(p)]
        if parts:
            yield merge_blocks(parts)
        else:  # every buffered row is the frontier series, which continues in a file's next row group
            for c in cursors:
                if not c.read_all and c.last_sid == frontier:
                    c.read_more()
        cursors = [c for c in cursors if not c.done]


class _Cursor:
    """One file's rows [start, stop) of one metric (sorted by (sid, t)), read a row group at a time."""

    def __init__(self, reader: _MetricReader, start: int, stop: int) -> None:
        self._reader, self._next, self._stop = reader, start, stop
        self._buf = SampleBlock.empty()

    @property
    def read_all(self) -> bool:
        return self._next >= self._stop

    @property
    def done(self) -> bool:
        return self.read_all and not len(self._buf)

    @property
    def last_sid(self) -> int:
        return int(self._buf.sid[-1])

    def fill(self) -> None:
        """At least one row buffered, unless the range is read to its end."""
        while not len(self._buf) and not self.read_all:
            self.read_more()

    def read_more(self) -> None:
        piece, self._next = self._reader.read_rows(self._next, self._stop)
        b = self._buf
        self._buf = piece if not len(b) else SampleBlock(np.concatenate([b.sid, piece.sid]),
                                                         np.concatenate([b.t, piece.t]), np.concatenate([b.v, piece.v]))

    def take_below(self, sid: int | None) -> SampleBlock:
        """The buffered rows of series below ``sid`` (all of them for None), taken out of the buffer."""
        b = self._buf
        k = len(b) if sid is None else int(np.searchsorted(b.sid, sid, "left"))
        self._buf = SampleBlock(b.sid[k:], b.t[k:], b.v[k:])
        return SampleBlock(b.sid[:k], b.t[:k], b.v[:k])


class _MetricReader:
    """One sample file, read metric by metric: each metric's rows are one contiguous range, and
    its row groups are the only ones read."""

    def __init__(self, pf: pq.ParquetFile, path: str) -> None:
        self._pf = pf
        meta = pf.metadata
        sizes = np.array([meta.row_group(i).num_rows for i in range(meta.num_row_groups)], np.int64)
        self._rg_start = np.concatenate([[0], np.cumsum(sizes)])
        self.rows = _metric_rows(pf, path, self._rg_start)  # metric -> (first row, end row)
        # The last row group read: it usually holds the start of the next metric too.
        self._cached: tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def read_rows(self, start: int, stop: int) -> tuple[SampleBlock, int]:
        """Rows from ``start`` to the end of its row group or ``stop``, whichever comes first; and the next row."""
        rg = int(np.searchsorted(self._rg_start, start, "right")) - 1
        cols = self._row_group(rg)
        end = min(stop, int(self._rg_start[rg + 1]))
        lo, hi = start - int(self._rg_start[rg]), end - int(self._rg_start[rg])
        return SampleBlock(*(c[lo:hi] for c in cols)), end

    def _row_group(self, rg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._cached is not None and self._cached[0] == rg:
            return self._cached[1]
        tb = self._pf.read_row_group(rg, columns=["sid", "t", "v"])
        cols = tuple(tb.column(n).to_numpy() for n in ("sid", "t", "v"))
        self._cached = (rg, cols)
        return cols


def _metric_rows(pf: pq.ParquetFile, path: str, rg_start: np.ndarray) -> dict[str, tuple[int, int]]:
    """Each metric's row range in a file sorted by metric. A row group whose statistics say it
    holds one metric is not read; only the metric column of the others is."""
    meta = pf.metadata
    col = meta.schema.names.index("metric")
    runs: list[tuple[str, int, int]] = []  # (metric, first row, end row), in file order
    for rg in range(meta.num_row_groups):
        st = meta.row_group(rg).column(col).statistics
        if st is not None and st.has_min_max and st.min == st.max:
            runs.append((st.min, int(rg_start[rg]), int(rg_start[rg + 1])))
            continue
        offset = int(rg_start[rg])
        for chunk in pf.read_row_group(rg, columns=["metric"]).column(0).chunks:
            if not pa.types.is_dictionary(chunk.type):  # a plain string column (files DuckDB wrote)
                chunk = chunk.dictionary_encode()
            codes = chunk.indices.to_numpy()
            starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
            ends = np.r_[starts[1:], len(codes)]
            values = chunk.dictionary.take(codes[starts]).to_pylist()
            runs.extend((m, offset + int(a), offset + int(b)) for m, a, b in zip(values, starts, ends))
            offset += len(codes)
    rows: dict[str, tuple[int, int]] = {}
    for m, a, b in runs:
        if m in rows:
            if rows[m][1] != a:  # rows of a metric that are not together: the file is not sorted by metric
                raise ValueError(f"{path}: rows of metric {m!r} are not together (not sorted by metric)")
            a = rows[m][0]
        rows[m] = (a, b)
    return rows


class _SampleWriter:
    """Appends metrics (in name order) to a new sample file in row groups of exactly
    ``row_group_rows`` rows (the last one excepted), as a flush writes them."""

    def __init__(self, path: str, names: list[str], row_group_rows: int) -> None:
        self._writer = pq.ParquetWriter(path, parquet_io.SAMPLE_SCHEMA, **parquet_io.sample_file_options())
        self._path = path
        self._names = pa.array(names, pa.string())
        self._rows = row_group_rows
        self._pending: list[tuple[int, SampleBlock]] = []  # (metric code, rows) not written yet
        self._pending_rows = 0

    def append(self, code: int, block: SampleBlock) -> None:
        pos, n = 0, len(block)
        while n - pos >= self._rows - self._pending_rows:  # enough to fill a row group
            take = self._rows - self._pending_rows
            self._pending.append((code, SampleBlock(block.sid[pos:pos + take], block.t[pos:pos + take],
                                                    block.v[pos:pos + take])))
            self._pending_rows += take
            pos += take
            self._write_pending()
        if pos < n:  # the rest waits for the next metrics, copied so it does not keep this metric's arrays alive
            self._pending.append((code, SampleBlock(block.sid[pos:].copy(), block.t[pos:].copy(),
                                                    block.v[pos:].copy())))
            self._pending_rows += n - pos

    def close(self) -> None:
        if self._pending_rows:
            self._write_pending()
        self._writer.close()

    def discard(self) -> None:
        """Close without writing what is pending and delete the half-written file."""
        self._writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._path)

    def _write_pending(self) -> None:
        codes = np.repeat(np.array([c for c, _ in self._pending], np.int32), [len(b) for _, b in self._pending])
        cols = [b for _, b in self._pending]
        if len(cols) == 1:
            sid, t, v = cols[0].sid, cols[0].t, cols[0].v
        else:
            sid, t, v = (np.concatenate(c) for c in zip(*((b.sid, b.t, b.v) for b in cols)))
        self._writer.write_table(parquet_io.sample_table(codes, self._names, sid, t, v), row_group_size=self._rows)
        self._pending, self._pending_rows = [], 0


_SIDE_MERGE = {
    # union_by_name: series files of earlier versions hold "labels" (JSON) where newer ones hold "key"
    "series": "SELECT DISTINCT ON (sid) * FROM read_parquet($files, union_by_name = true) {where}",
    "spans": "SELECT sid, greatest(min(min_t), $floor) AS min_t, max(max_t) AS max_t FROM read_parquet($files) "
             "{where} GROUP BY sid",
}


def compact_side_tables(storage) -> int:
    """Merge this writer's series and spans files once there are many. Returns files merged."""
    snap = storage.table.current
    done = 0
    for kind in ("series", "spans"):
        own = snap.own(kind, storage.writer_id)
        if len(own) >= MAX_SIDE_FILES:
            with storage.table.transaction() as tx:
                _rewrite_side(storage, tx, kind, list(own))
                tx.commit()
            done += len(own)
    return done


def purge_side_tables(storage, dropped: np.ndarray, floor_ms: int) -> None:
    """Rewrite both side tables without the ``dropped`` series, spans starting no earlier than
    ``floor_ms`` (the oldest sample kept), in one commit: retention's share of the series table."""
    snap = storage.table.current
    with storage.table.transaction() as tx:
        for kind in ("series", "spans"):
            own = snap.own(kind, storage.writer_id)
            if own:
                _rewrite_side(storage, tx, kind, list(own), dropped, floor_ms)
        tx.commit()


def _rewrite_side(storage, tx, kind: str, files: list[str], dropped: np.ndarray | None = None,
                  floor_ms: int = np.iinfo(np.int64).min) -> None:
    out, _ = tx.new_path(kind)
    where = "" if dropped is None else "WHERE sid NOT IN (SELECT sid FROM dropped)"
    con = storage.samples.duckdb_cursor()
    try:
        if dropped is not None:
            con.register("dropped", pa.table({"sid": pa.array(dropped, pa.int64())}))
        params = {"files": files} | ({"floor": int(floor_ms)} if kind == "spans" else {})
        con.execute(f"COPY ({_SIDE_MERGE[kind].format(where=where)}) TO '{_sql_path(out + '.tmp')}' "
                    "(FORMAT parquet, COMPRESSION zstd)", params)
    finally:
        con.close()
    parquet_io.fsync_file(out + ".tmp")
    os.replace(out + ".tmp", out)
    fsync_dir(os.path.dirname(out))
    tx.add_side(kind, out)
    tx.retire(files)
