"""Storage lifecycle and write side: open (replay), append (durable), flush, retention.

Ordering that makes ``kill -9`` safe: an append puts its samples in the head and submits its
WAL record under one lock, and a flush cuts the WAL and swaps the head under the same lock.
So every record in a WAL segment <= the cut is in the flushed snapshot, and a segment is
deleted only after the commit of the snapshot's Parquet files, which carries the cut as this
writer's Delta app transaction (what ``flushed.json`` was), is in the table's log.

Files other than the WAL belong to ``self.table`` (storage/files/table.py, Delta Lake): a flush commits its
files there; compaction and retention (storage/upkeep/maintenance.py) go through it too. This process is
writer ``writer_id``: its WAL, lock, metadata and series checkpoint live in ``<path>/wal/<writer id>/``.
Other writers' commits (ingest shards, other gateways on the same directory) join reads at ``follow()``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import numpy as np

from .. import npsort
from ..errors import Unavailable
from ..limits.context import QueryContext
from ..malloc import release_free_memory
from ..model import Matcher, series_keys
from . import crashpoints
from .batch import AppendBatch, ExemplarBlock, HistogramBlock, MetricMetadata, SampleBlock, SeriesSet
from .catalog.book import CatalogBook
from .catalog.catalog import Catalog
from .files import metadata_file, migrate, parquet_io
from .files.table import Snapshot, Table, Transaction
from .files.table import file_writer as table_writer
from .files.writer_lock import WriterLock
from .fileset import FileSet
from .memory import startup
from .memory.head import Head
from .memory.memory_span import MemorySpan
from .memory.pending_series import PendingSeries
from .native_store import NativeStore
from .read.querier import SampleQuerier
from .read.series import SeriesQuerier
from .upkeep.maintenance import Maintenance
from .upkeep.retention_share import RetentionShare
from .wal.native_wal import NativeSegmentEncoder
from .wal.undurable import UndurableSeries
from .wal.wal import WAL

log = logging.getLogger(__name__)

# /-/ready's reason until open() is done; the front of a multi-process gateway waits for a child past it
# (procs/readiness.py).
REPLAYING = "replaying the WAL"

_ACTIVE_WINDOW_MS = 3600_000  # a series is active if it received a sample within the last hour
FLUSH_RETRY_S = 5.0  # a failed flush is retried this soon


class Storage:
    """Composed of parts that share the file set (``files``, the one owner of the swap lock) and the catalog book
    (``book``): ``retention``'s drops, ``native`` histograms and exemplars, the memory ``span`` an ingest shard
    publishes, and the ``series`` and ``samples`` readers. Storage itself runs the lifecycle, appends, flushes and
    following other writers, and answers the read seam (storage/seam.py) by handing each call to its part."""

    def __init__(self, path: str, *, flush_interval_s: float = 120.0, flush_max_samples: int = 5_000_000,
                 partition_ms: int = 3600_000, retention_ms: int = 15 * 86400_000,
                 wal_segment_size: int = 64 << 20, duckdb_memory_limit: int = 256 << 20, duckdb_threads: int = 2,
                 sample_cache_bytes: int = 128 << 20, telemetry=None, clock=time.time, writer_id: str = "gw0",
                 vacuum_delay_s: float = 0.0, follow_others: bool = True, follow_interval_s: float = 5.0) -> None:
        self.path = os.path.abspath(path)
        self.writer_id = writer_id
        self.writer_dir = os.path.join(self.path, "wal", writer_id)  # the WAL and this writer's own state
        # Other writers' series and spans join the catalog (a querier, a gateway sharing the table);
        # an ingest shard holds only its own.
        self.follow_others = follow_others
        self.follow_interval_s = follow_interval_s  # how often the flusher loads other writers' commits
        self.flush_interval_s = flush_interval_s
        self.flush_max_samples = flush_max_samples
        self.partition_ms = partition_ms
        self.retention_ms = retention_ms
        self.wal_segment_size = wal_segment_size
        self.telemetry = telemetry
        self.clock = clock  # seconds since the epoch: retention and "active" follow it (tests move it)
        self.table = Table(self.path, writer_id, vacuum_delay_s)
        self.files = FileSet(self.table)  # the heads and the table's snapshot, and the lock that keeps them one
        self.book = CatalogBook(self.files, self.writer_dir, writer_id)
        # Filled by appends and replay, never replaced: the parts that read or prune it hold this one.
        self.metadata_by_metric: dict[str, dict[MetricMetadata, None]] = {}
        self._stop = threading.Event()
        self.retention = RetentionShare(self.files, self.book, self.metadata_by_metric)
        self.native = NativeStore(self.files, self.book, self.table, writer_id, partition_ms,
                                  self.retention.unflushed_min_t, self._stop)
        self.span = MemorySpan(self.files)
        self.series = SeriesQuerier(self.book, self.metadata_by_metric)
        self.samples = SampleQuerier(self.path, self.files, self.book, duckdb_memory_limit, sample_cache_bytes,
                                     duckdb_threads)
        self._lock_file = WriterLock(os.path.join(self.writer_dir, "lock"), writer_id)
        self._followed: set[str] = set()  # other writers' side files already in the catalog
        self._last_follow = 0.0
        # follow() swaps the table's snapshot before its series join the catalog; a reader that saw the new
        # version mid-follow would select without them. ensure_version compares with this instead: the
        # samples table version whose other writers' series and spans are all in the catalog.
        self._follow_lock = threading.Lock()
        self._followed_version = -1
        self.maintenance = Maintenance(self)
        self.ready = False
        self.open_error: BaseException | None = None
        self.wal: WAL | None = None
        self._flush_lock = threading.Lock()
        self.pending_series = PendingSeries()  # new since the last flush: written by the next one
        self._committing_series = PendingSeries()  # taken by the flush in progress, until its commit is seen
        self.undurable = UndurableSeries()  # registered, but no record defining them is on disk yet
        self._last_flush = time.monotonic()  # of the last flush (or failed one's retry schedule): the flusher's clock
        self._flusher: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """Load the series table and partitions, replay the WAL. Blocking; run off the event loop."""
        t0 = time.perf_counter()
        self.claim_writer_id()
        migrate.old_layout(self.path, self.writer_id, self.writer_dir)
        removed = self.table.open()
        if removed:
            log.warning("removed %d half-written file(s) left by a crash", removed)
        startup.load_series(self)
        files = self.table.current
        if self.follow_others:
            self._follow_catalog(files)
        self._followed_version = files.table_version
        self._last_follow = time.monotonic()  # the table was just read: the next follow is an interval away
        self.metadata_by_metric.update(metadata_file.load(self.writer_dir))
        wal_dir = self.writer_dir
        committed = self.table.committed_wal_segment()
        replayed = startup.replay_wal(self, wal_dir, committed)
        if self.telemetry:
            self.telemetry.head_samples.set(self.files.head_samples())
        self.wal = WAL(wal_dir, self.wal_segment_size, NativeSegmentEncoder, on_fsync=self._observe_fsync,
                       on_health=self._observe_wal_health, after_segment=committed)
        self._observe_wal_health(self.wal.error, write=False)
        elapsed = time.perf_counter() - t0
        if self.telemetry:
            self.telemetry.replay_duration.set(elapsed)
        log.info("storage open: %d series, %d partition files, %d WAL records replayed (%d head samples) in %.2fs",
                 len(self.catalog), len(files.samples), replayed, self.files.head_samples(), elapsed)
        with self.files.atomically():
            self.ready = True
            self.span.live = True
            self.span.publish()

    def claim_writer_id(self) -> None:
        """Take this writer id's lock (once); raises WriterIdInUse while another live process holds it."""
        os.makedirs(self.writer_dir, exist_ok=True)
        self._lock_file.acquire()

    def not_ready_reason(self) -> str | None:
        """Why /-/ready is 503, or None when it is 200."""
        if self.open_error is not None:
            return f"storage failed to open: {self.open_error}"
        if not self.ready or self.wal is None:
            return REPLAYING
        err = self.wal.error
        if err is not None:
            return f"the WAL cannot be written ({err}); writes answer 503 until it can"
        return None

    def start_background(self) -> None:
        self._flusher = threading.Thread(target=self._flush_loop, name="flusher", daemon=True)
        self._flusher.start()

    @property
    def stopping(self) -> threading.Event:
        """Set when shutdown begins: long maintenance work gives up at its next step."""
        return self._stop

    def close(self, flush: bool = True) -> None:
        """Shut down in order: the flusher stops (its compaction gives up at the next metric; it is
        waited for, never abandoned while it uses the files or DuckDB), the last flush, the WAL,
        then reads end (no new ones; running ones finish -- the app has cancelled them already),
        then DuckDB closes and retired files go."""
        self._stop.set()
        if self._flusher:
            while self._flusher.is_alive():
                self._flusher.join(timeout=30)
                if self._flusher.is_alive():
                    log.warning("shutdown: waiting for the flusher to finish its current step")
        if flush and self.ready:
            try:
                self.flush()
            except OSError as err:  # what is not flushed stays in the WAL and is replayed at start
                log.error("final flush failed: %s", err)
        if self.wal:
            self.wal.close()
        self.table.close()
        self.samples.close()
        self.table.collect()
        self._lock_file.release()

    # ---------------------------------------------------------------- other writers
    def follow(self) -> int:
        """Load other writers' commits now: their sample files join reads, their series and spans join
        the catalog, their removes are honoured. Returns the samples table version now seen."""
        with self._follow_lock:
            moved = self.table.refresh() is not None
            # also when only this writer's own commits moved the snapshot: one that lost a commit race
            # took other writers' commits into it on the way
            if self.follow_others and (moved or self.table.current.table_version != self._followed_version):
                self._follow_catalog(self.table.current)
            self._followed_version = self.table.current.table_version
            self._last_follow = time.monotonic()
            return self._followed_version

    def ensure_version(self, version: int) -> None:
        """Make reads include at least samples table version ``version``, other writers' series too
        (cheap when they already do; waits for a follow in progress rather than reading past it)."""
        if self._followed_version < version:
            with self._follow_lock:
                if self._followed_version >= version:
                    return
            self.follow()

    def _follow_step(self) -> None:
        try:
            self.follow()
        except Exception:  # noqa: BLE001 - reads go on with the view loaded last; retried at the next step
            log.exception("loading other writers' commits failed; retried in %ss", self.follow_interval_s)
            self._last_follow = time.monotonic()

    def _follow_catalog(self, now: Snapshot) -> None:
        """Series and spans files other writers committed (not read yet) into the catalog."""
        series = [p for p in now.series if p not in self._followed and table_writer(p) != self.writer_id]
        spans = [p for p in now.spans if p not in self._followed and table_writer(p) != self.writer_id]
        if not series and not spans:
            return
        sids, keys = parquet_io.read_series(series)
        span_cols = [parquet_io.read_spans(p) for p in spans]
        with self.files.atomically():  # appends register series under it
            cat = self.catalog
            cat.add_keys(sids, keys)
            for sid, min_t, max_t in span_cols:
                g = cat.lookup(sid)
                known = g >= 0
                cat.touch_dense(g[known], min_t[known])
                cat.touch_dense(g[known], max_t[known])
        self._followed.update(series, spans)

    # ---------------------------------------------------------------- write side
    @property
    def catalog(self) -> Catalog:
        """The catalog in use (retention may replace it: take it once per use)."""
        return self.book.catalog

    def has_series(self, sid: int) -> bool:
        return sid in self.catalog

    @property
    def series_count(self) -> int:
        """Series in the series table (also those no longer sampled, until retention drops them)."""
        return len(self.catalog)

    def active_series(self) -> int:
        return self.catalog.active_count(self._active_since())

    def active_series_for_metric(self, name: str) -> int:
        cat = self.catalog
        table = cat.metrics.get(name)
        return 0 if table is None else cat.active_count(self._active_since(), table)

    def _active_since(self) -> int:
        return int(self.clock() * 1000) - _ACTIVE_WINDOW_MS

    @property
    def series_epoch(self) -> int:
        """Changes each time retention drops series (callers caching series ids compare it)."""
        return self.book.epoch

    def dropped_since(self, epoch: int) -> np.ndarray | None:
        """Sids dropped by retention after ``epoch``; None if that is too long ago to say."""
        with self.files.atomically():
            return self.book.dropped_since(epoch)

    async def append(self, batch: AppendBatch) -> None:
        """Durable when it returns: the WAL record is fsync'd."""
        if self.wal is None or not self.ready:
            raise Unavailable("storage is not ready (WAL replay in progress)")
        if self.wal.error is not None:  # refuse before touching the head; the WAL probes the disk meanwhile
            raise Unavailable(f"the WAL cannot be written: {self.wal.error}", retry_after_s=5)
        if self.files.held() > 4 * self.flush_max_samples:
            raise Unavailable("head is full: flushing to Parquet is behind; retry later", retry_after_s=5)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def done(err: BaseException | None) -> None:
            def settle() -> None:
                if not fut.done():
                    fut.set_result(err)
            loop.call_soon_threadsafe(settle)

        with self.files.atomically():
            self.undurable.carry(batch)
            self._apply(batch)
            self.wal.submit(batch, done)
        err = await fut
        if err is not None:
            raise Unavailable(f"WAL write failed: {err}")
        self.undurable.written(batch)

    def _apply(self, batch: AppendBatch) -> None:
        if batch.new_series:
            fresh = self.catalog.add_many(batch.new_series)
            if fresh:  # kept as series keys until the flush writes them to the series table
                keys = self._keys_of(batch, fresh)
                self.pending_series.add([sid for sid, _ in fresh], keys)
                self.undurable.add(fresh, keys)
        if len(batch.sid):
            g = self.catalog.lookup(batch.sid)
            if g.min() < 0:  # the sender's series cache predates a retention pass that dropped the series
                raise Unavailable("a series of this write was dropped by retention while the write was on its way; "
                                  "retry", retry_after_s=1)
        self.native.apply(batch)  # refuses (like the check above) before anything is applied
        if len(batch.sid):
            self.files.append(batch.sid, batch.t, batch.v)
            self.catalog.touch_dense(g, batch.t)
            batch.rows, batch.rows_epoch = g, self.book.epoch  # the WAL encoder's shortcut (walcodec.py)
        for m in batch.metadata:
            self.metadata_by_metric.setdefault(m.metric, {})[m] = None
        self.span.publish()
        if self.telemetry:
            self.telemetry.head_samples.set(self.files.head_samples())

    @staticmethod
    def _keys_of(batch: AppendBatch, fresh: list) -> list[bytes]:
        """The series keys of ``fresh`` (new series of ``batch`` storage did not know), reusing the ones
        the pipeline built for hashing (``batch.series_keys``, in ``batch.new_series`` order)."""
        keys = batch.series_keys
        if keys is None or len(keys) != len(batch.new_series):
            return series_keys([lb for _, lb in fresh])
        if len(fresh) == len(keys):  # none known or repeated: the same series in the same order
            return keys
        by_sid = dict(zip([sid for sid, _ in batch.new_series], keys))
        return [by_sid[sid] for sid, _ in fresh]

    def _observe_wal_health(self, err: BaseException | None, write: bool) -> None:
        if self.telemetry:
            self.telemetry.storage_writable.set(0 if err else 1)
            if err is not None and write:
                self.telemetry.wal_write_failures.inc()

    def _observe_fsync(self, seconds: float, records_n: int) -> None:
        if self.telemetry:
            self.telemetry.wal_fsync.observe(seconds)
            self.telemetry.wal_group_size.observe(records_n)

    # ---------------------------------------------------------------- flush
    def _flush_loop(self) -> None:
        self._last_flush = time.monotonic()
        while not self._stop.wait(1.0):
            self._observe_free_bytes()
            if self._flush_due():
                self._flush_now()
                self.maintenance.run()  # retention, compaction, side tables: each retried on its own
                release_free_memory()  # compaction's buffers too
            if time.monotonic() - self._last_follow >= self.follow_interval_s:
                self._follow_step()
            self.table.collect()  # removed files no query holds any more, past the vacuum delay
            if self.telemetry:
                self.telemetry.active_series.set(self.active_series())

    def _flush_due(self) -> bool:
        return (time.monotonic() - self._last_flush >= self.flush_interval_s
                or self.files.in_head() >= self.flush_max_samples)

    def _flush_now(self) -> None:
        if self._flush_step():
            self._last_flush = time.monotonic()
        else:  # retry soon (space may come back any moment), not a whole interval later
            self._last_flush = time.monotonic() - self.flush_interval_s + min(self.flush_interval_s, FLUSH_RETRY_S)

    def flush_if_due(self) -> None:
        """Flush now if the flusher would: compaction (in the flusher thread) calls it between the chunks it
        writes, so a long merge never holds the head back until writes are refused as "head is full"."""
        if threading.current_thread() is self._flusher and not self._stop.is_set() and self._flush_due():
            self._flush_now()

    def _flush_step(self) -> bool:
        try:
            self.flush()
            return True
        except Exception:
            log.exception("flush failed; the samples stay in the WAL and in memory, retrying in %ss", FLUSH_RETRY_S)
            if self.telemetry:
                self.telemetry.flush_failures.inc()
            return False

    def _observe_free_bytes(self) -> None:
        if self.telemetry:
            try:
                st = os.statvfs(self.path)
                self.telemetry.storage_free_bytes.set(st.f_bavail * st.f_frsize)
            except OSError:
                pass

    def flush(self) -> None:
        """Head -> Parquet partitions + series table, committed to the table with the WAL cut; then drop
        the flushed WAL segments. A failed flush leaves no file (the transaction deletes what it wrote):
        its snapshot stays readable in ``flushing`` and its new series stay pending, and the next flush
        writes them first, in the same commit as the head it cuts (its WAL cut covers theirs). So the
        committed cut never passes a WAL segment whose samples are not committed. While flushes fail, the
        samples held in memory (head and failed snapshots) are bounded: ``append`` refuses past the limit."""
        with self._flush_lock:
            t0 = time.perf_counter()
            with self.files.atomically():
                if not self.files.pending() and not len(self.pending_series):
                    return
                cut = self.wal.cut()
                crashpoints.reached("flush.cut")
                snaps = self.files.cut()
                new_series = self._committing_series = self.pending_series.take()
                meta = {k: list(v) for k, v in self.metadata_by_metric.items()}
            try:
                with self.table.transaction() as tx:
                    for snap in snaps.heads:  # older ones are flushes that failed: in write order
                        self._write_snapshot(tx, snap)
                    self.native.write(tx, snaps.native_heads)
                    if len(new_series):
                        path, _ = tx.new_path("series")
                        parquet_io.write_series(path, new_series.columns())
                        tx.add_side("series", path)
                    crashpoints.reached("flush.files")
                    metadata_file.write(self.writer_dir, meta)
                    tx.commit(wal_cut=cut)  # the cut rides in the samples commit: the WAL marker
                    with self.files.atomically():
                        self.files.committed(snaps)
                        self._committing_series = PendingSeries()
                        self.span.publish()
            except BaseException:
                with self.files.atomically():
                    self.pending_series.put_back(new_series)
                    self._committing_series = PendingSeries()
                raise
            crashpoints.reached("flush.marker")
            self.wal.remove_upto(cut)
            self.book.checkpoint()
            release_free_memory()
            if self.telemetry:
                self.telemetry.flush_duration.observe(time.perf_counter() - t0)
                self.telemetry.head_samples.set(self.files.head_samples())

    def _write_snapshot(self, tx: Transaction, snap: Head) -> None:
        sid, t, v = snap.columns()
        if not len(sid):
            return
        self.samples.learn_interval(sid, t)
        code, names = self.catalog.metric_rank_codes(self.catalog.dense(sid))
        part = t // self.partition_ms
        partitions = npsort.unique(part)
        for p in partitions:
            if len(partitions) > 1:
                m = np.flatnonzero(part == p)
                psid, pt, pv, pcode = sid[m], t[m], v[m], code[m]
            else:  # the usual case: the whole flush falls in one partition, no copies
                psid, pt, pv, pcode = sid, t, v, code
            # (sid, t) order is already there; a stable sort by metric keeps it within each metric.
            order = np.argsort(pcode, kind="stable")
            path, seq = tx.new_path("samples", int(p) * self.partition_ms)
            tx.add_samples(parquet_io.write_samples(path, int(p) * self.partition_ms, seq, self.writer_id, pcode[order], names,
                                                    psid[order], pt[order], pv[order]))
        path, _ = tx.new_path("spans")
        parquet_io.write_spans(path, sid, t)
        tx.add_side("spans", path)

    # ---------------------------------------------------------------- reads, each handed to its part
    @property
    def extent_sink(self):
        """Where the span of what memory holds goes (memory/memory_span.py); an ingest shard sets it before open."""
        return self.span.sink

    @extent_sink.setter
    def extent_sink(self, sink) -> None:
        self.span.sink = sink

    def recent_heads(self) -> tuple[list, list, int, np.ndarray]:
        """(the float heads holding samples not yet committed, oldest first; the native heads (histograms and
        exemplars) likewise; the file set version they are not in: the samples table version this writer has
        seen; the sorted ids of this writer's series not committed in that version (new since the last flush,
        or in the flush committing now): every other series it holds is in the table's series at that
        version): taken together in the file set's ``atomically()``, as a flush commits (storage/read/recent.py)."""
        with self.files.atomically():
            heads = (*self.files.heads(), self.files.version())
            uncommitted = np.concatenate([self.pending_series.sids(), self._committing_series.sids()])
        return (*heads, npsort.unique(uncommitted))


    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None,
                      among: np.ndarray | None = None) -> SeriesSet:
        return self.series.select_series(matchers, start_ms, end_ms, ctx, limit, among)

    def select_ids(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                   ctx: QueryContext | None = None, among: np.ndarray | None = None) -> np.ndarray:
        return self.series.select_ids(matchers, start_ms, end_ms, ctx, among)

    def labels_of_ids(self, ids: np.ndarray) -> list:
        return self.series.labels_of_ids(ids)

    def metric_series(self, name: str) -> int:
        return self.series.metric_series(name)

    def holds_ids(self, ids: np.ndarray) -> bool:
        return self.series.holds_ids(ids)

    def label_names(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                    ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        return self.series.label_names(matchers, start_ms, end_ms, ctx, limit)

    def label_values(self, name: str, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        return self.series.label_values(name, matchers, start_ms, end_ms, ctx, limit)

    def tsdb_status(self, limit: int) -> dict:
        return self.series.tsdb_status(limit)

    def tsdb_counts(self) -> dict:
        return self.series.tsdb_counts()

    def metadata(self, metric: str | None = None, limit: int | None = None) -> dict[str, list[dict]]:
        return self.series.metadata(metric, limit)

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        return self.samples.estimate_samples(series, start_ms, end_ms)

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        return self.samples.read_samples(ids, start_ms, end_ms, ctx)

    def sample_cache_stats(self) -> tuple[int, int, set[str]]:
        return self.samples.sample_cache_stats()

    def histogram_metrics(self) -> frozenset[str]:
        return self.native.histogram_metrics()

    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> HistogramBlock:
        return self.native.read_histograms(ids, start_ms, end_ms, ctx)

    def read_exemplars(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> ExemplarBlock:
        return self.native.read_exemplars(ids, start_ms, end_ms, ctx)
