"""Following other writers (ingest shards, other gateways on the same directory): their sample files join reads
when the table's snapshot moves, their series and spans files join the catalog, their removes are honoured.
A querier and a gateway sharing the table follow; an ingest shard holds only its own series."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from ... import npsort
from ..files import parquet_io
from ..files.snapshot import Snapshot
from ..files.kinds import file_seq
from ..files.kinds import file_writer as table_writer
from ..fileset import FileSet
from .side_index import spans as archive_spans, unknown_series
from .book import NONE, CatalogBook

log = logging.getLogger(__name__)


class Follower:
    def __init__(self, files: FileSet, book: CatalogBook, writer_id: str, follow_others: bool,
                 interval_s: float, keys_of: Callable[[np.ndarray], tuple[np.ndarray, list[bytes]]]) -> None:
        self.files = files
        self.keys_of = keys_of  # (sids, keys) of series in the side files (the archive's index: only those asked)
        self.book = book
        self.writer_id = writer_id
        self.follow_others = follow_others  # whether other writers' series and spans join the catalog
        self.interval_s = interval_s  # how often the flusher loads other writers' commits
        self._followed: set[str] = set()  # other writers' side files already in the catalog
        self._last = 0.0
        # follow() swaps the table's snapshot before its series join the catalog; a reader that saw the new
        # version mid-follow would select without them. ensure_version compares with this instead: the
        # samples table version whose other writers' series and spans are all in the catalog.
        self._lock = threading.Lock()
        self._version = -1

    def start(self) -> None:
        """At open, once the table is read and this writer's own series are loaded."""
        files = self.files.table.current
        if self.follow_others:
            self._adopt_checkpoint(files)
            self._join_catalog(files)
        self._version = files.table_version
        self._last = time.monotonic()  # the table was just read: the next follow is an interval away

    def follow(self) -> int:
        """Load other writers' commits now. Returns the samples table version now seen."""
        table = self.files.table
        with self._lock:
            moved = table.refresh() is not None
            # also when only this writer's own commits moved the snapshot: one that lost a commit race
            # took other writers' commits into it on the way
            if self.follow_others and (moved or table.current.table_version != self._version):
                self._join_catalog(table.current)
            self._version = table.current.table_version
            self._last = time.monotonic()
            return self._version

    def ensure_version(self, version: int) -> None:
        """Make reads include at least samples table version ``version``, other writers' series too
        (cheap when they already do; waits for a follow in progress rather than reading past it)."""
        if self._version < version:
            with self._lock:
                if self._version >= version:
                    return
            self.follow()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval_s

    def step(self) -> None:
        """The flusher's follow: a failure is logged, and retried an interval later."""
        try:
            self.follow()
        except Exception:  # noqa: BLE001 - reads go on with the view loaded last; retried at the next step
            log.exception("loading other writers' commits failed; retried in %ss", self.interval_s)
            self._last = time.monotonic()

    def _adopt_checkpoint(self, now: Snapshot) -> None:
        """A process holding no series of its own (a query process) starts from the catalog checkpoint of the
        writer it follows with the largest one here (its gateway's ingest shard): at 2.7M series, loading its
        arrays takes ~1 s where splitting the keys of its series files took ~15 s. That writer's side files the
        checkpoint covers are then skipped; its newer ones, and other writers', join as usual. The checkpoint may
        also name series of the writer's head that no series file holds yet: they exist, so knowing them early
        is right."""
        if len(self.book.catalog):
            return
        writers = {table_writer(p) for p in (*now.series, *now.spans)} - {self.writer_id}
        sizes = {w: self.book.checkpoint_size(w) for w in writers}
        best = max(sizes, key=sizes.__getitem__, default=None)
        if best is None or not sizes[best]:
            return
        covered = self.book.adopt_checkpoint(best)
        if covered is not None:
            self._followed.update(p for p in (*now.series, *now.spans)
                                  if table_writer(p) == best and file_seq(p) <= covered)

    def _join_catalog(self, now: Snapshot) -> None:
        """Series and spans files other writers committed (not read yet) into the catalog."""
        series = [p for p in now.series if p not in self._followed and table_writer(p) != self.writer_id]
        spans = [p for p in now.spans if p not in self._followed and table_writer(p) != self.writer_id]
        if not series and not spans:
            return
        span_cols = [parquet_io.read_spans(p) for p in spans]
        sids, keys = self._series_to_join(series, span_cols)
        with self.files.atomically():  # appends register series under it
            cat = self.book.catalog
            cat.add_keys(sids, keys)
            for cols in span_cols:
                cat.touch_spans(*cols)
        self._followed.update(series, spans)

    def _series_to_join(self, series: list[str], span_cols: list) -> tuple[np.ndarray, list[bytes]]:
        """(sids, keys) of the series of these files the catalog does not hold, their keys read for them alone: a
        merge of another writer's side files names every series again, millions at the seed's scale, and reading
        every key of it (as Python objects) cost the query process gigabytes each time.

        Once the head window forgot series, only those the new spans show written after every forgotten one join:
        the others stay in the archive (catalog/archive.py) instead of coming back to memory. One this process
        forgot and its writer did not is written again and named in its writer's new spans only (they run ahead of
        the files read here): its key comes from the series files read before (the archive's index)."""
        cat = self.book.catalog
        until = self.book.forgotten_until
        fresh = None
        if until != NONE:
            span_sid, _, last = archive_spans(span_cols)
            fresh = span_sid[last > until]
        sids: list[np.ndarray] = []
        keys: list[bytes] = []
        for path in series:
            sid, key = unknown_series(cat.lookup, path, fresh)
            sids.append(sid)
            keys.extend(key)
        joined = np.concatenate(sids) if sids else np.empty(0, np.int64)
        if fresh is None:
            return joined, keys
        missing = fresh[cat.lookup(fresh) < 0]
        missing = missing[~npsort.isin(missing, joined)]
        if not len(missing):
            return joined, keys
        old_sids, old_keys = self.keys_of(missing)
        return np.concatenate([joined, old_sids]), keys + old_keys
