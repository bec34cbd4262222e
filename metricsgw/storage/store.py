"""Storage: lifecycle (open with replay, close), append (durable) and flush, over the parts it composes.

Ordering that makes ``kill -9`` safe: an append puts its samples in the head and submits its
WAL record under one lock, and a flush cuts the WAL and swaps the head under the same lock.
So every record in a WAL segment <= the cut is in the flushed snapshot, and a segment is
deleted only after the commit of the snapshot's Parquet files, which carries the cut as this
writer's Delta app transaction (what ``flushed.json`` was), is in the table's log.

Files other than the WAL belong to ``self.table`` (storage/files/table.py, Delta Lake): a flush commits its
files there; compaction and retention (storage/upkeep/maintenance.py) go through it too. This process is
writer ``writer_id``: its WAL, lock, metadata and series checkpoint live in ``<path>/wal/<writer id>/``.
Other writers' commits (ingest shards, other gateways on the same directory) join reads at ``follow()``
(storage/catalog/follow.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from .. import npsort
from ..errors import Unavailable
from ..limits.context import QueryContext
from ..malloc import release_free_memory
from ..model import Matcher, MetricMetadata, SampleBlock
from .batch import AppendBatch, ExemplarBlock, HistogramBlock, SeriesSet
from .catalog.archive import Archive
from .catalog.book import CatalogBook
from .catalog.catalog import Catalog
from .catalog.follow import Follower
from .files import metadata_file, migrate
from .files.table import Table
from .files.writer_lock import WriterLock
from .fileset import FileSet
from .memory import startup
from .memory.late_writes import LateState, LateWrites
from .memory.memory_span import MemorySpan
from .memory.pending_series import UnflushedSeries, fresh_keys
from .native_store import NativeStore
from .not_ready import REPLAYING
from .read.querier import SampleQuerier
from .read.series import SeriesQuerier
from .upkeep.flusher import Flusher
from .upkeep.head_flush import HeadFlush
from .upkeep.idle_series import IdleSeries
from .upkeep.maintenance import Maintenance
from .upkeep.retention_share import RetentionShare
from .wal.native_wal import NativeSegmentEncoder
from .wal.undurable import UndurableSeries
from .wal.wal import WAL

log = logging.getLogger(__name__)


_ACTIVE_WINDOW_MS = 3600_000  # a series is active if it received a sample within the last hour


class Storage:
    """Composed of parts that share the file set (``files``, the one owner of the swap lock) and the catalog book
    (``book``): ``retention``'s drops, ``native`` histograms and exemplars, the memory ``span`` an ingest shard
    publishes, the ``series`` and ``samples`` readers, the ``follower`` of other writers' commits and the ``flusher``
    thread. Storage itself runs the lifecycle, appends and flushes, and answers the read seam (storage/seam.py) by
    handing each call to its part."""

    def __init__(self, path: str, *, flush_interval_s: float = 120.0, flush_max_samples: int = 5_000_000,
                 partition_ms: int = 3600_000, retention_ms: int = 15 * 86400_000, table_store=None,
                 wal_segment_size: int = 64 << 20, wal_fsync: bool = True, duckdb_memory_limit: int = 256 << 20, duckdb_threads: int = 2,
                 sample_cache_bytes: int = 128 << 20, telemetry=None, clock=time.time, writer_id: str = "gw0",
                 vacuum_delay_s: float = 0.0, follow_others: bool = True, follow_interval_s: float = 5.0,
                 late_after_ms: int = 300_000, head_window_ms: int = 3600_000, archive_bytes: int = 32 << 20) -> None:
        self.path = os.path.abspath(path)
        self.writer_id = writer_id
        self.writer_dir = os.path.join(self.path, "wal", writer_id)  # the WAL and this writer's own state
        self.partition_ms = partition_ms
        self.retention_ms = retention_ms
        self.wal_segment_size = wal_segment_size
        self.wal_fsync = wal_fsync
        self.telemetry = telemetry
        self.clock = clock  # seconds since the epoch: retention and "active" follow it (tests move it)
        self.table = Table(self.path, writer_id, vacuum_delay_s, store=table_store)  # None: on local disk only
        self.files = FileSet(self.table)  # the heads and the table's snapshot, and the lock that keeps them one
        self.book = CatalogBook(self.files, self.writer_dir, writer_id)
        # Filled by appends and replay, never replaced: the parts that read or prune it hold this one.
        self.metadata_by_metric: dict[str, dict[MetricMetadata, None]] = {}
        self._stop = threading.Event()
        self.retention = RetentionShare(self.files, self.book, self.metadata_by_metric)
        self.native = NativeStore(self.files, self.book, writer_id, partition_ms, self.retention.unflushed_min_t,
                                  self._stop)
        self.span = MemorySpan(self.files)
        # Samples already older than the results cache's freshness when written (memory/late_writes.py)
        self.late = LateWrites(late_after_ms)
        self.late_sink: Callable[[LateState], None] | None = None  # an ingest shard's extent board
        self.archive = Archive(self.files, self.book, writer_id, follow_others, lambda: self.maintenance.data_floor(),
                               archive_bytes)
        self.series = SeriesQuerier(self.book, self.archive, self.metadata_by_metric)
        self.samples = SampleQuerier(self.path, self.files, self.book, self.archive, duckdb_memory_limit,
                                     sample_cache_bytes, duckdb_threads)
        self.follower = Follower(self.files, self.book, writer_id, follow_others, follow_interval_s, self.archive.keys_of)
        self._lock_file = WriterLock(os.path.join(self.writer_dir, "lock"), writer_id)
        self.maintenance = Maintenance(self)
        self.flusher = Flusher(self, flush_interval_s, flush_max_samples)
        self.head_flush = HeadFlush(self)
        self.ready = False
        self.open_error: BaseException | None = None
        self.wal: WAL | None = None
        self.unflushed = UnflushedSeries()  # this writer's series no committed series file holds yet
        # A series the retention no longer keeps samples of has nothing for memory to hold either: the head window is
        # never longer than the retention.
        self.idle = IdleSeries(self.files, self.book, self.unflushed, min(head_window_ms, retention_ms), clock)
        self.undurable = UndurableSeries()  # registered, but no record defining them is on disk yet

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """Load the series table and partitions, replay the WAL. Blocking; run off the event loop."""
        t0 = time.perf_counter()
        self.claim_writer_id()
        migrate.old_layout(self.path, self.writer_id, self.writer_dir)
        removed = self.table.open()
        if removed:
            log.warning("removed %d half-written file(s) left by a crash", removed)
        t_table = time.perf_counter()
        startup.load_series(self)
        self.follower.start()
        t_series = time.perf_counter()
        from_checkpoint = self.book.checkpointed  # (before the WAL: how far behind the checkpoint was is what costs)
        self.metadata_by_metric.update(metadata_file.load(self.writer_dir))
        wal_dir = self.writer_dir
        committed = self.table.committed_wal_segment()
        replayed = startup.replay_wal(self, wal_dir, committed)
        t_wal = time.perf_counter()
        if self.telemetry:
            self.telemetry.head_samples.set(self.files.head_samples())
        self.wal = WAL(wal_dir, self.wal_segment_size, NativeSegmentEncoder, fsync=self.wal_fsync, on_fsync=self._observe_fsync,
                       on_health=self._observe_wal_health, after_segment=committed)
        self._observe_wal_health(self.wal.error, write=False)
        elapsed = time.perf_counter() - t0
        if self.telemetry:
            self.telemetry.replay_duration.set(elapsed)
        log.info("storage open: %d series (%d from the checkpoint), %d partition files, %d WAL records replayed (%d head "
                 "samples) in %.2fs (table %.2fs, series table %.2fs, WAL %.2fs)",
                 len(self.catalog), from_checkpoint, len(self.table.current.samples), replayed,
                 self.files.head_samples(), elapsed, t_table - t0, t_series - t_table, t_wal - t_series)
        release_free_memory()  # what loading the series and replaying the WAL freed, before serving
        with self.files.atomically():
            self.ready = True
            self.span.live = True
            self.span.publish()
            if self.late_sink is not None:
                self.late_sink(self.late.state())

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
        self.flusher.start()

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
        self.flusher.join()
        if flush and self.ready:
            try:
                self.flush()
                self.book.checkpoint(force=True)  # the next start loads the series table, splits no key
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
        return self.follower.follow()

    def ensure_version(self, version: int) -> None:
        """Make reads include at least samples table version ``version``, other writers' series too."""
        self.follower.ensure_version(version)

    # ---------------------------------------------------------------- write side
    @property
    def catalog(self) -> Catalog:
        """The catalog in use (retention may replace it: take it once per use)."""
        return self.book.catalog

    def has_series(self, sid: int) -> bool:
        return sid in self.catalog

    @property
    def series_count(self) -> int:
        """Series in the series table in memory (also those no longer sampled, until the head window forgets them)."""
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
        """Changes each time retention drops series or the head window forgets some (callers caching series ids
        compare it)."""
        return self.book.epoch

    def dropped_since(self, epoch: int) -> np.ndarray | None:
        """Sids dropped by retention or forgotten after ``epoch``; None if that is too long ago to say."""
        with self.files.atomically():
            return self.book.dropped_since(epoch)

    async def append(self, batch: AppendBatch) -> None:
        """Durable when it returns: the WAL record is fsync'd."""
        waiting = self.append_nowait(batch)
        if waiting is not None:
            await waiting

    def append_nowait(self, batch: AppendBatch) -> asyncio.Future | None:
        """``append`` without a coroutine when it can: None once the record is written and synced here (the WAL
        idle and quick, the usual case), else the future of the WAL writer's group commit, raising Unavailable if
        it fails. What follows the write is done when the record is synced, whether anyone awaits it or not (a
        sender that hangs up must not leave a half-done append: the next request sees it done)."""
        if self.wal is None or not self.ready:
            raise Unavailable("storage is not ready (WAL replay in progress)")
        if self.wal.error is not None:  # refuse before touching the head; the WAL probes the disk meanwhile
            raise Unavailable(f"the WAL cannot be written: {self.wal.error}", retry_after_s=5)
        if self.files.held() > 4 * self.flusher.max_samples:
            raise Unavailable("head is full: flushing to Parquet is behind; retry later", retry_after_s=5)
        with self.files.atomically():
            self.undurable.carry(batch)
            self._apply(batch)
            written = self.wal.write_here(batch)  # on this thread when the WAL is idle and quick (wal.py)
            if written is None:
                return self._submit(batch)
        self._written(batch, written[0])
        return None

    def _submit(self, batch: AppendBatch) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        settled = loop.create_future()  # what the caller awaits

        def settle(err: BaseException | None) -> None:  # in the loop, once the WAL thread's verdict is in
            try:
                self._written(batch, err)
            except Unavailable as refused:
                if not settled.cancelled():
                    settled.set_exception(refused)
            else:
                if not settled.cancelled():
                    settled.set_result(None)

        self.wal.submit(batch, lambda err: loop.call_soon_threadsafe(settle, err))
        return settled

    def _written(self, batch: AppendBatch, err: BaseException | None) -> None:
        if err is not None:
            raise Unavailable(f"WAL write failed: {err}")
        self.undurable.written(batch)

    def _apply(self, batch: AppendBatch) -> None:
        if batch.new_series:
            fresh = self.catalog.add_many(batch.new_series)
            if fresh:  # kept as series keys until the flush writes them to the series table
                keys = fresh_keys(batch, fresh)
                self.unflushed.add([sid for sid, _ in fresh], keys)
                self.undurable.add(fresh, keys)
        if len(batch.sid):
            g = self.catalog.lookup(batch.sid)
            if g.min() < 0:  # the sender's series cache predates a retention pass that dropped the series
                raise Unavailable("a series of this write was dropped by retention (or forgotten by the head window) "
                                  "while the write was on its way; retry", retry_after_s=1)
        self.native.apply(batch)  # refuses (like the check above) before anything is applied
        if len(batch.sid):
            self.files.append(batch.sid, batch.t, batch.v)
            self.catalog.touch_dense(g, batch.t)
            batch.rows, batch.rows_epoch = g, self.book.epoch  # the WAL encoder's shortcut (walcodec.py)
        for m in batch.metadata:
            self.metadata_by_metric.setdefault(m.metric, {})[m] = None
        self.span.publish()
        self._note_late(batch)

    def late_state(self) -> LateState:
        """Where late samples landed (memory/late_writes.py), for this process's results cache."""
        with self.files.atomically():
            return self.late.state()

    def _note_late(self, batch: AppendBatch) -> None:
        now_ms = int(self.clock() * 1000)
        late = self.late.note(batch.t, now_ms)
        if batch.native is not None:
            late = self.late.note(batch.native.hist_t, now_ms) or late
        if late and self.late_sink is not None:
            self.late_sink(self.late.state())
        if self.telemetry:
            self.telemetry.head_samples.set(self.files.head_samples())

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
    def flush_if_due(self) -> None:
        """Flush now if the flusher would (compaction calls it between the chunks it writes)."""
        self.flusher.flush_if_due()

    def flush(self) -> None:
        """Head -> Parquet partitions + series table, committed with the WAL cut (upkeep/head_flush.py)."""
        self.head_flush.run()

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
            uncommitted = self.unflushed.sids()
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

    def tsdb_counts(self, start_ms: int | None = None, end_ms: int | None = None,
                    matchers: list[Matcher] | None = None, ctx: QueryContext | None = None) -> dict:
        return self.series.tsdb_counts(start_ms, end_ms, matchers, ctx)

    def metadata(self, metric: str | None = None, limit: int | None = None) -> dict[str, list[dict]]:
        return self.series.metadata(metric, limit)

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        return self.samples.estimate_samples(series, start_ms, end_ms)

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        return self.samples.read_samples(ids, start_ms, end_ms, ctx)

    def sample_cache_stats(self) -> tuple[int, int, set[str]]:
        return self.samples.sample_cache_stats()

    def duckdb_memory(self) -> int:
        return self.samples.duckdb_memory()

    def histogram_metrics(self) -> frozenset[str]:
        return self.native.histogram_metrics()

    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> HistogramBlock:
        return self.native.read_histograms(ids, start_ms, end_ms, ctx)

    def read_exemplars(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> ExemplarBlock:
        return self.native.read_exemplars(ids, start_ms, end_ms, ctx)
