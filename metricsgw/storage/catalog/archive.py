"""The archive: the series the head window forgot (upkeep/idle_series.py), as the table's series and spans files
hold them, for the reads memory alone cannot answer.

A read whose window starts after ``book.forgotten_until`` (the newest sample of any forgotten series) needs only
the catalog. An older one (or one with no start) takes the archive too: a ``Catalog`` of the series on disk the read
may select that memory does not hold from as early (a series forgotten and written again starts in memory at its
return: over its old range it comes from here), with the spans the files tell. Readers take the series of both
(read/series.py). Like the catalog after retention's drops, the archive leaves out the series with no sample left on
disk and starts spans at the oldest sample kept (``floor``), so answers are those memory would have given had it
forgotten nothing.

Each read gets a catalog of its own, of only what it may select: the series whose span meets its window, of the
metric its matchers name; their label sets are read from the series files then, and charged to the query before
they are. What is kept between reads is the side files' compact index (catalog/side_index.py: 40 bytes a series on
disk) while it fits its share of ``--query.max-memory`` (limits/memory.py), or past it while the running queries'
pool can lend the rest (it is then charged there); one that does not fit is read again for each read that needs it and
charged to that query.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from ... import npsort
from ...errors import Unavailable
from ...limits.context import QueryContext
from ...limits.memory import MemoryPool
from ...model import METRIC_NAME, Matcher
from ..files.snapshot import Snapshot
from ..fileset import FileSet
from .book import NONE, CatalogBook
from .catalog import Catalog
from .side_index import RowCounts, SideIndex, read_keys, spans_of_files
from .sorted_search import search_sorted

log = logging.getLogger(__name__)


# A catalog series costs about this much (its label values, indexes and the key read to make it): the charge made
# before the label sets are read, so a read that cannot afford them is refused before it holds them.
SERIES_BYTES = 512
SERIES_INDEX_BYTES = 40  # what the side files' index holds a series (side_index.py)


class Archive:
    def __init__(self, files: FileSet, book: CatalogBook, writer_id: str, follow_others: bool,
                 floor: Callable[[], int], max_bytes: int) -> None:
        self.files = files
        self.book = book
        self.writer_id = writer_id
        self.follow_others = follow_others  # whose series files: every writer's, or this writer's (an ingest shard)
        self.floor = floor  # the oldest sample on disk: retention deleted what is older
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # one reader of the index at a time (it is updated as files come and go)
        self._index = SideIndex()
        self._rows = RowCounts()
        # The running queries' pool (limits/memory.py), set by the process that answers queries: an index past the
        # archive's share borrows the rest from it while kept (``_borrowed`` bytes), else is read for each call.
        self.pool: MemoryPool | None = None
        self._borrowed = 0
        self._forgotten_key: tuple | None = None  # what _forgotten_spans was computed from
        self._forgotten_spans: tuple = ()
        self._too_big = 0  # bytes of the last index that did not fit (logged once per size class)

    def needed(self, start_ms: int | None) -> bool:
        until = self.book.forgotten_until
        return until != NONE and (start_ms is None or start_ms <= until)

    def catalog_for(self, start_ms: int | None, ctx: QueryContext | None = None, end_ms: int | None = None,
                    matchers: list[Matcher] | None = None) -> Catalog | None:
        """The forgotten series a read over [start_ms, end_ms] selecting with ``matchers`` may need, as a catalog;
        None if the read needs none (it starts after every forgotten series' last sample)."""
        if not self.needed(start_ms):
            return None
        names = _metric_names(matchers or [])
        with self._lock, self.files.table.pin() as snap:  # compaction may retire the side files meanwhile
            index = self._held_index(snap, ctx)
            sid, first, last = self._window(index, start_ms, end_ms)
            located = index.locate(sid)
            if names is not None:  # (the sids the filter drops are not in the catalog made: their spans go unused)
                codes = index.codes_of(names)
                located = [(f, at[m], pos[m]) for f, at, pos in located
                           for m in [np.isin(f.metric[pos], codes)] if m.any()]
            return self._catalog(located, sid, first, last, ctx)

    def catalog_of(self, ids: np.ndarray, start_ms: int, ctx: QueryContext | None = None) -> Catalog | None:
        """The archive's catalog of these series ids alone (those it holds), or None if a read from ``start_ms``
        needs no archive."""
        if not self.needed(start_ms):
            return None
        with self._lock, self.files.table.pin() as snap:
            index = self._held_index(snap, ctx)
            sid, first, last = self._window(index, None, None, npsort.unique(np.asarray(ids, np.int64)))
            return self._catalog(index.locate(sid), sid, first, last, ctx)

    def spans_of(self, ids: np.ndarray, start_ms: int, ctx: QueryContext | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(found, first, last) of each of these ids as the archive holds it (no label set read), or None if a read
        from ``start_ms`` needs no archive."""
        if not self.needed(start_ms):
            return None
        ids = np.asarray(ids, np.int64)
        with self._lock, self.files.table.pin() as snap:
            index = self._held_index(snap, ctx)
            sid, first, last = self._window(index, None, None, npsort.unique(ids))
        if not len(sid):
            return np.zeros(len(ids), bool), np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
        pos = search_sorted(sid, ids)
        found = sid[pos] == ids
        return found, first[pos], last[pos]

    def keys_of(self, ids: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
        """(sorted sids, series keys) of those of these series ids the side files hold."""
        ids = npsort.unique(np.asarray(ids, np.int64))
        with self._lock, self.files.table.pin() as snap:
            sids, keys = _read_keys(self._held_index(snap, None).locate(ids), ids)
        order = np.argsort(sids, kind="stable")
        return sids[order], [keys[i] for i in order.tolist()]

    def metric_names(self) -> set[str]:
        """The metrics of every series on disk with a sample left (memory's or forgotten)."""
        with self._lock, self.files.table.pin() as snap:
            index = self._held_index(snap, None)
            sid, _, _ = self._on_disk(index)
            codes = npsort.unique(self._metric_codes(index, sid))
            return {index.names[c] for c in codes.tolist() if c >= 0}

    def stats(self) -> tuple[int, int]:
        """(series, bytes) the kept index holds (and the forgotten series' spans picked from it)."""
        index = self._index
        return len(index), index.nbytes + sum(a.nbytes for a in self._forgotten_spans)

    def expired(self, horizon_ms: int) -> np.ndarray:
        """Sorted sids of this writer's series files with no sample at or after ``horizon_ms`` (retention deleted
        the older partitions) that memory does not hold: retention purges them from the side files, as it does the
        series it drops from memory."""
        if self.book.forgotten_until == NONE:
            return np.empty(0, np.int64)
        with self.files.table.pin() as snap:
            sid, _, last = spans_of_files(snap.own("spans", self.writer_id))
        gone = sid[last < horizon_ms]
        return gone[self.book.catalog.lookup(gone) < 0]

    # ---------------------------------------------------------------- inside the lock
    def _held_index(self, snap: Snapshot, ctx: QueryContext | None) -> SideIndex:
        """The index of the snapshot's side files: the kept one brought up to date; or, when it would not fit its
        bound, one read for this call, charged to its query before it is read."""
        series, spans_files = self._side_files(snap, "series"), self._side_files(snap, "spans")
        size = self._rows.total(series) * SERIES_INDEX_BYTES  # a series file names each of its writer's series once
        if self._fits(size):
            self._index.update(series, spans_files)
            return self._index
        self._index = SideIndex()  # not kept: each call reads the files
        self._forgotten_key, self._forgotten_spans = None, ()
        if size.bit_length() != self._too_big.bit_length():
            log.warning("the series archive's index (about %d bytes) is over its share of --query.max-memory (%d "
                        "bytes): reads reaching back before the head window read it again each time; raise "
                        "--query.max-memory", size, self.max_bytes)
        self._too_big = size
        if ctx is not None:
            ctx.charge_bytes(size, "series archive")
        index = SideIndex()
        index.update(series, spans_files)
        return index

    def _fits(self, size: int) -> bool:
        """Whether an index of ``size`` bytes may be kept: within the archive's share, or borrowing the rest from the
        running queries' pool (which then has that much less, as long as the index is kept)."""
        need = max(size - self.max_bytes, 0)
        if need == self._borrowed:
            return True
        if self.pool is None:
            return False
        try:
            if need > self._borrowed:
                self.pool.take(need - self._borrowed, "the series archive's index")
            else:
                self.pool.give(self._borrowed - need)
        except Unavailable:
            self.pool.give(self._borrowed)
            self._borrowed = 0
            return False
        self._borrowed = need
        return True

    def _on_disk(self, index: SideIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sids, first, last) of every series on disk with a span starting by ``forgotten_until`` and a sample left,
        spans starting at the floor."""
        sid, first, last = index.spans
        floor = self.floor()
        ok = (first <= self.book.forgotten_until) & (last >= floor)
        return sid[ok], np.maximum(first[ok], floor), last[ok]

    def _forgotten(self, index: SideIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_on_disk`` less the series memory holds from at least as early (the catalog answers for them): what the
        archive adds. Kept until the files, the floor or what memory forgot change (a series registered meanwhile
        is new, or one forgotten and back, which stays here for its old range)."""
        book = self.book
        key = (index.generation, book.epoch, book.forgotten_until, self.floor())
        if self._forgotten_key != key:
            sid, first, last = self._on_disk(index)
            if len(sid):
                cat = book.catalog
                g = cat.lookup(sid)
                held = g >= 0
                held[held] = cat.first_ms.a[g[held]] <= first[held]
                sid, first, last = sid[~held], first[~held], last[~held]
            if index is not self._index:  # an index read for one call: so is this
                return sid, first, last
            self._forgotten_key, self._forgotten_spans = key, (sid, first, last)
        return self._forgotten_spans

    def _window(self, index: SideIndex, start_ms: int | None, end_ms: int | None, among: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sids, first, last) of the forgotten series a read over [start_ms, end_ms] may select (no window unless
        both ends are given, as ``Catalog.select``), or of those of ``among`` (sorted unique sids)."""
        sid, first, last = self._forgotten(index)
        if among is not None and len(sid):
            pos = search_sorted(sid, among)
            at = pos[sid[pos] == among]
            sid, first, last = sid[at], first[at], last[at]
        if start_ms is not None and end_ms is not None:
            ok = (last >= start_ms) & (first <= end_ms)
            sid, first, last = sid[ok], first[ok], last[ok]
        return sid, first, last

    @staticmethod
    def _metric_codes(index: SideIndex, sid: np.ndarray) -> np.ndarray:
        codes = np.full(len(sid), -1, np.int32)
        for f, at, pos in index.locate(sid):
            codes[at] = f.metric[pos]
        return codes

    @staticmethod
    def _catalog(located: list, sid: np.ndarray, first: np.ndarray, last: np.ndarray,
                 ctx: QueryContext | None) -> Catalog:
        """A catalog of the series ``located`` (``SideIndex.locate(sid)``, or some of it) with the spans of ``sid``,
        their label sets read from the series files."""
        n = sum(len(at) for _, at, _ in located)
        if ctx is not None:
            ctx.charge_bytes(n * SERIES_BYTES, "series archive")
        cat = Catalog()
        sids, keys = _read_keys(located, sid)
        if not len(sids):
            return cat
        cat.add_keys(sids, keys)
        g = cat.lookup(sid)
        known = g >= 0
        cat.first_ms.a[g[known]] = first[known]
        cat.last_ms.a[g[known]] = last[known]
        if ctx is not None:
            ctx.charge_bytes(cat.nbytes() - n * SERIES_BYTES, "series archive")  # (a negative difference: none)
        return cat

    def _side_files(self, snap: Snapshot, kind: str) -> tuple[str, ...]:
        return tuple(getattr(snap, kind) if self.follow_others else snap.own(kind, self.writer_id))


def _read_keys(located: list, ids: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """(sids, series keys) of ``index.locate(ids)``'s series, file by file."""
    sids: list[np.ndarray] = []
    keys: list[bytes] = []
    for f, at, pos in located:
        sids.append(ids[at])
        keys.extend(read_keys(f, pos))
    return (np.concatenate(sids) if sids else np.empty(0, np.int64)), keys


def _metric_names(matchers: list[Matcher]) -> set[str] | None:
    """The metric names a selection is limited to by its ``__name__="..."`` matchers, None when it is not."""
    names = None
    for m in matchers:
        if m.name == METRIC_NAME and m.op == "=":
            names = {m.value} if names is None else names & {m.value}
    return names
