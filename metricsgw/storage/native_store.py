"""Storage's share for native histograms and exemplars: head, flush, reads, retention.

A part of ``Storage`` beside the float path, which it follows step for step (same file set, same
WAL record, same flush transaction, same pins) without changing it:
  append     ``apply`` inside ``files.atomically()``, before the float samples (a series dropped by
             retention meanwhile refuses the whole write, 503, before anything is applied)
  flush      the file set's cut takes the native heads with the float ones; ``write`` inside the
             flush's transaction (histograms and exemplars files, one per partition, and a spans file for
             the histograms' series)
  read       ``read_histograms`` / ``read_exemplars``: pinned files + flushing heads + head (the file set's
             view), first written wins; samples charged to the query as they load
  retention  ``expired_files``: files of the partitions retention drops (a flush writes one
             file per partition and kind)
  compaction ``compact``: a closed partition's files of one kind merged into one
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import npsort
from ..errors import Unavailable
from ..limits.context import QueryContext
from .batch import AppendBatch, ExemplarBlock, HistogramBlock
from .catalog.book import CatalogBook
from .files import native_files, parquet_io
from .fileset import FileSet
from .memory.native_head import NativeHead, merge_exemplars, merge_histograms, take

# What a loaded histogram sample costs a query's memory budget: its stored bytes twice (the merge of a read's
# parts copies them once), and its row: sid and t, and what the engine keeps beside the bytes (promql/native.py's
# Decoded: offset, count, sum, reset hint, the selection's value). The engine parses a histogram only when a step
# touches it, and keeps a bounded number decoded, which it charges itself. An exemplar is small.
HISTOGRAM_ROW_BYTES = 64
EXEMPLAR_BYTES = 128


def histogram_bytes_each(block: HistogramBlock) -> int:
    """What each histogram of ``block`` costs a query's memory, on average (see HISTOGRAM_ROW_BYTES)."""
    n = len(block)
    if not n:
        return HISTOGRAM_ROW_BYTES
    blob = block.blob
    stored = blob.nbytes if hasattr(blob, "nbytes") else sum(map(len, blob))
    return 2 * -(-stored // n) + HISTOGRAM_ROW_BYTES


def exemplar_bytes_each(block: ExemplarBlock) -> int:
    return EXEMPLAR_BYTES


@dataclass(frozen=True)
class _Kind:
    name: str  # the table kind, the NativeHead method, the stage named in errors
    read_file: Callable
    merge: Callable
    bytes_each: Callable  # of a block: what each of its rows costs a query's memory


_NO_ROWS = np.empty(0, np.int64)  # (a write without exemplars, the usual one, skips their catalog lookup)
_HISTOGRAMS = _Kind("histograms", native_files.read_histograms, merge_histograms, histogram_bytes_each)
_EXEMPLARS = _Kind("exemplars", native_files.read_exemplars, merge_exemplars, exemplar_bytes_each)


class NativeStore:
    def __init__(self, files: FileSet, book: CatalogBook, writer_id: str, partition_ms: int,
                 unflushed_min_t: Callable[[], int], stopping: threading.Event) -> None:
        self.files = files
        self.book = book
        self.table = files.table
        self.writer_id = writer_id
        self.partition_ms = partition_ms
        self.unflushed_min_t = unflushed_min_t  # compaction leaves the partitions memory still writes to
        self.stopping = stopping  # set at shutdown: compaction gives up at the next partition
        # Metric names that have histograms: of the files (their footers), and of the sids appended
        # since (resolved to names when asked, so appends do no label work).
        self._head_metrics: set[str] = set()
        self._unnamed_sids: list[np.ndarray] = []
        self._file_metrics: tuple[int, frozenset[str]] = (-1, frozenset())

    # ---------------------------------------------------------------- write side
    def apply(self, batch: AppendBatch) -> None:
        nat = batch.native
        if not nat:
            return
        cat = self.book.catalog
        g = cat.lookup(nat.hist_sid) if nat.histograms else _NO_ROWS
        ge = cat.lookup(nat.ex_sid) if nat.exemplars else _NO_ROWS
        if (len(g) and g.min() < 0) or (len(ge) and ge.min() < 0):
            raise Unavailable("a series of this write was dropped by retention (or forgotten by the head window) "
                              "while the write was on its way; retry", retry_after_s=1)
        self.files.append_native(nat)
        if len(g):
            cat.touch_dense(g, nat.hist_t)
            self._unnamed_sids.append(nat.hist_sid)

    def replay(self, nat) -> None:
        """A WAL record's histograms and exemplars back into the head (start-up; series are known later)."""
        self.files.append_native(nat)
        if nat.histograms:
            self._unnamed_sids.append(nat.hist_sid)

    def _metric_names(self, sids: np.ndarray) -> set[str]:
        cat = self.book.catalog
        g = cat.lookup(npsort.unique(sids))
        g = g[g >= 0]
        if not len(g):
            return set()
        codes, names = cat.metric_rank_codes(g)
        return {names[c] for c in npsort.unique(codes).tolist()}

    def histogram_metrics(self) -> frozenset[str]:
        """Names of the metrics that hold native histograms (PromQL looks for histograms only there)."""
        with self.files.atomically():
            if self._unnamed_sids:
                self._head_metrics |= self._metric_names(np.concatenate(self._unnamed_sids))
                self._unnamed_sids = []
            head = frozenset(self._head_metrics)
        snap = self.table.current
        if self._file_metrics[0] != snap.version:
            self._file_metrics = (snap.version, frozenset().union(*map(native_files.metrics_of, snap.histograms)))
        return head | self._file_metrics[1]

    def write(self, tx, heads: list[NativeHead]) -> None:
        """One histograms file and one exemplars file per partition the heads' rows fall in, so
        retention retires them with that partition and compaction merges a partition's files."""
        if not heads:
            return
        merged = [h.merged() for h in heads]
        hist = merge_histograms([m[0] for m in merged])
        for part in self._by_partition(hist):
            path, _ = tx.new_path("histograms", self._partition_start(part))
            with self.files.atomically():  # the catalog, which appends add to
                metrics = self._metric_names(part.sid)
            native_files.write_histograms(path, part, metrics)
            tx.add_side("histograms", path)
        for part in self._by_partition(merge_exemplars([m[1] for m in merged])):
            path, _ = tx.new_path("exemplars", self._partition_start(part))
            native_files.write_exemplars(path, part)
            tx.add_side("exemplars", path)
        if len(hist):
            path, _ = tx.new_path("spans")
            parquet_io.write_spans(path, hist.sid, hist.t)
            tx.add_side("spans", path)

    def _partition_start(self, block) -> int:
        return int(block.t[0]) // self.partition_ms * self.partition_ms

    def _by_partition(self, block) -> list:
        """The block's rows per partition (each still sorted by (sid, t))."""
        if not len(block):
            return []
        part = block.t // self.partition_ms
        if part.min() == part.max():
            return [block]
        return [take(block, np.flatnonzero(part == p)) for p in npsort.unique(part)]

    # ---------------------------------------------------------------- read side
    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> HistogramBlock:
        """Histogram samples of these series in [start_ms, end_ms], sorted by (sid, t), bit-exact blobs."""
        return self._read_native(_HISTOGRAMS, ids, start_ms, end_ms, ctx)

    def read_exemplars(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> ExemplarBlock:
        """Exemplars of these series in [start_ms, end_ms], sorted by (sid, t)."""
        return self._read_native(_EXEMPLARS, ids, start_ms, end_ms, ctx)

    def _read_native(self, kind: "_Kind", ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext):
        ids_sorted = npsort.unique(np.asarray(ids, np.int64))
        stage = f"reading {kind.name}"
        with self.files.atomically():
            view = self.files.view()
        parts = []
        with view.pin as snap:
            for path in getattr(snap, kind.name):
                lo, hi = native_files.t_range(path)
                if hi < start_ms or lo > end_ms:
                    continue
                ctx.check(stage)
                parts.append(kind.read_file(path, ids_sorted, start_ms, end_ms))
                ctx.charge_loaded(len(parts[-1]), stage, kind.bytes_each(parts[-1]))
        for h in view.native_heads:
            parts.append(getattr(h, kind.name)(ids_sorted, start_ms, end_ms))
            ctx.charge_loaded(len(parts[-1]), stage, kind.bytes_each(parts[-1]))
        return kind.merge(parts)

    # ---------------------------------------------------------------- retention
    def files_min_t(self) -> int:
        files = self.table.current.histograms
        return min((native_files.t_range(p)[0] for p in files), default=int(np.iinfo(np.int64).max))

    def expired_files(self, cutoff_ms: int) -> list[str]:
        """Files of partitions that ended before ``cutoff_ms`` (the partitions retention retires for
        the float samples; a file is of the partition of its newest row)."""
        snap = self.table.current
        own = (*snap.own("histograms", self.writer_id), *snap.own("exemplars", self.writer_id))  # others drop theirs
        return [path for path in own if self._partition_of(path) + self.partition_ms < cutoff_ms]

    def _partition_of(self, path: str) -> int:
        return native_files.t_range(path)[1] // self.partition_ms * self.partition_ms

    def compact(self, min_files: int = 4) -> int:
        """Merge the histogram (and exemplar) files of each closed partition into one, in write order
        (first written wins, as for reads), through the table's transaction (this writer's files only). Returns files merged."""
        snap = self.table.current
        head_min = self.unflushed_min_t()
        done = 0
        for kind in (_HISTOGRAMS, _EXEMPLARS):
            by_part: dict[int, list[str]] = {}
            for path in snap.own(kind.name, self.writer_id):  # in write (seq) order; others compact theirs
                by_part.setdefault(self._partition_of(path), []).append(path)
            for part_ms, paths in sorted(by_part.items()):
                if len(paths) < min_files or part_ms + self.partition_ms > head_min or self.stopping.is_set():
                    continue
                everything = np.iinfo(np.int64)
                blocks = [kind.read_file(p, None, everything.min, everything.max) for p in paths]
                with self.table.transaction() as tx:
                    out, _ = tx.new_path(kind.name, part_ms)
                    if kind is _HISTOGRAMS:
                        native_files.write_histograms(out, kind.merge(blocks),
                                                      set().union(*map(native_files.metrics_of, paths)))
                    else:
                        native_files.write_exemplars(out, kind.merge(blocks))
                    tx.add_side(kind.name, out)
                    tx.retire(paths)  # deleted once no running query holds them
                    tx.commit()
                done += len(paths)
        return done
