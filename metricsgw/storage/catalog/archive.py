"""The archive: the series table as the table's series and spans files hold it, for the reads memory alone cannot
answer once the head window forgot series (upkeep/idle_series.py).

A read whose window starts after ``book.forgotten_until`` (the newest sample of any forgotten series) needs only
the catalog. An older one (or one with no start) takes the archive too: a ``Catalog`` of every series on disk whose
span starts by then, the spans as the files tell them. Readers take the series of both (series/querier.py), so a
series forgotten and written again, whose span in memory starts at its return, is still found over its old range.
Like the catalog after retention's drops, the archive leaves out the series with no sample left on disk and starts
spans at the oldest sample kept (``floor``), so answers are those memory would have given had it forgotten nothing.

The archive is a cache of what the files say: kept while the table's files and ``forgotten_until`` do not change,
and only while it fits its byte bound (a share of ``--query.max-memory``, limits/memory.py). One that does not fit
is built for the call that needs it and charged to that query.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from ... import npsort
from ...limits.context import QueryContext
from ..files import parquet_io
from ..files.snapshot import Snapshot
from ..fileset import FileSet
from .book import NONE, CatalogBook
from .catalog import Catalog

log = logging.getLogger(__name__)


class Archive:
    def __init__(self, files: FileSet, book: CatalogBook, writer_id: str, follow_others: bool,
                 floor: Callable[[], int], max_bytes: int) -> None:
        self.files = files
        self.book = book
        self.writer_id = writer_id
        self.follow_others = follow_others  # whose series files: every writer's, or this writer's (an ingest shard)
        self.floor = floor  # the oldest sample on disk: retention deleted what is older
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # one build at a time: the reads that wait for it take the same one
        self._kept: tuple[tuple, Catalog] | None = None
        self._too_big = 0  # bytes of the last build that did not fit (logged once per size class)

    def catalog_for(self, start_ms: int | None, ctx: QueryContext | None = None) -> Catalog | None:
        """The archive if a read starting at ``start_ms`` (None: the beginning) needs it, else None."""
        until = self.book.forgotten_until
        if until == NONE or (start_ms is not None and start_ms > until):
            return None
        with self._lock, self.files.table.pin() as snap:  # compaction may retire the side files meanwhile
            key = (snap.version, until)  # the version moves with every change of the files, and so of the floor
            if self._kept is not None and self._kept[0] == key:
                return self._kept[1]
            cat = build(list(self._side_files(snap, "series")), list(self._side_files(snap, "spans")), until,
                        self.floor())
            size = cat.nbytes()
            if size <= self.max_bytes:
                self._kept = (key, cat)
                return cat
            self._kept = None
        if size.bit_length() != self._too_big.bit_length():
            log.warning("the series archive (%d bytes) is over its share of --query.max-memory (%d bytes): "
                        "queries reaching back before the head window rebuild it; raise --query.max-memory",
                        size, self.max_bytes)
        self._too_big = size
        if ctx is not None:
            ctx.charge_bytes(size, "series archive")
        return cat

    def stats(self) -> tuple[int, int]:
        """(series, bytes) the kept archive holds."""
        kept = self._kept
        return (0, 0) if kept is None else (len(kept[1]), kept[1].nbytes())

    def expired(self, horizon_ms: int) -> np.ndarray:
        """Sorted sids of this writer's series files with no sample at or after ``horizon_ms`` (retention deleted
        the older partitions) that memory does not hold: retention purges them from the side files, as it does the
        series it drops from memory."""
        if self.book.forgotten_until == NONE:
            return np.empty(0, np.int64)
        with self.files.table.pin() as snap:
            sid, _, last = spans([parquet_io.read_spans(p) for p in snap.own("spans", self.writer_id)])
        gone = sid[last < horizon_ms]
        return gone[self.book.catalog.lookup(gone) < 0]

    def _side_files(self, snap: Snapshot, kind: str) -> tuple[str, ...]:
        return tuple(getattr(snap, kind) if self.follow_others else snap.own(kind, self.writer_id))


def build(series: list[str], span_files: list[str], until_ms: int, floor_ms: int) -> Catalog:
    """A catalog of the series in these files whose span starts by ``until_ms`` and ends at or after ``floor_ms``,
    spans starting no earlier than ``floor_ms``."""
    sid, first, last = spans([parquet_io.read_spans(p) for p in span_files])
    ok = (first <= until_ms) & (last >= floor_ms)
    sid, first, last = sid[ok], np.maximum(first[ok], floor_ms), last[ok]
    cat = Catalog()
    all_sids, keys = parquet_io.read_series(series)
    want = np.flatnonzero(npsort.members(all_sids, sid))
    cat.add_keys(all_sids[want], [keys[i] for i in want.tolist()])
    g = cat.lookup(sid)
    known = g >= 0
    cat.first_ms.a[g[known]] = first[known]
    cat.last_ms.a[g[known]] = last[known]
    return cat


def spans(cols: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted sids, first sample, last sample) over spans files' columns (``parquet_io.read_spans``; a series has a
    row in each file it is in)."""
    if not cols:
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    sid, lo, hi = (np.concatenate([c[i] for c in cols]).astype(np.int64) for i in range(3))
    order = np.argsort(sid, kind="stable")
    sid, lo, hi = sid[order], lo[order], hi[order]
    starts = npsort.run_starts(sid)
    return sid[starts], np.minimum.reduceat(lo, starts), np.maximum.reduceat(hi, starts)
