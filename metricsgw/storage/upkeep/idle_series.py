"""The head window's share of the storage: forgetting, in memory, the series not written for longer than the window
(``--storage.head-window``, or the retention if shorter), as Prometheus' head lets go of series no scrape writes.

Under pod churn every pod's series stop being written when the pod goes, and retention only deletes whole partitions:
without this, the series table (and every cache keyed by series) held every series of the retention, and
``/api/v1/status/tsdb`` counted them all. A forgotten series leaves the catalog (its label caches go with it), and so
the ingest pipeline's caches and the limit counters (they follow ``series_epoch``, as for retention's drops). It stays
on disk: the series and spans files still hold it, and reads over times up to ``book.forgotten_until`` find it there
(catalog/archive.py). A series written again is a new series to memory, with the same id (its labels' hash).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..catalog.book import CatalogBook
from ..catalog.catalog import Catalog
from ..fileset import FileSet
from ..memory.pending_series import UnflushedSeries

log = logging.getLogger(__name__)


class IdleSeries:
    def __init__(self, files: FileSet, book: CatalogBook, unflushed: UnflushedSeries, window_ms: int,
                 clock: Callable[[], float]) -> None:
        self.files = files
        self.book = book
        self.unflushed = unflushed  # series no committed series file holds yet: never forgotten (none to read back)
        self.window_ms = window_ms
        self.clock = clock  # seconds since the epoch, the storage's (tests move it)

    def forget_idle(self) -> np.ndarray:
        """Forget the series whose newest sample is older than the window, with nothing in memory and committed to
        the series files. The catalog is rebuilt without them while appends go on (as retention's drop) and swapped in
        under the lock appends take. Returns their sids."""
        none = np.empty(0, np.int64)
        cutoff = int(self.clock() * 1000) - self.window_ms
        with self.files.atomically():
            cat = self.book.catalog
            idle = self._idle(cat, cutoff)
        if not idle.any():
            return none
        new = cat.without(idle)  # the slow part, outside the lock: ingest goes on
        with self.files.atomically():
            at = np.flatnonzero(idle)
            if not np.array_equal(np.flatnonzero(self._idle(cat, cutoff)[: len(idle)]), at):
                return none  # a write reached one of them meanwhile: keep them all, decide again next pass
            cat.catch_up(new)
            sids = cat.sids.a[at].copy()
            self.book.forget(new, sids, int(cat.last_ms.a[at].max()))
        log.info("head window: %d series not written for %d s forgotten in memory, %d kept", len(sids),
                 self.window_ms // 1000, len(new))
        return sids

    def _idle(self, cat: Catalog, cutoff_ms: int) -> np.ndarray:
        """Mask over ``cat``'s dense indexes: series with a span ending before ``cutoff_ms``, nothing in memory, and in
        a committed series file. Inside ``files.atomically()``."""
        first, last = cat.first_ms.view, cat.last_ms.view[: len(cat.first_ms.view)]
        idle = (first != np.iinfo(np.int64).max) & (last < cutoff_ms)  # a series never sampled has no span to age
        at = np.flatnonzero(idle)
        if len(at):
            sids = cat.sids.a[at]
            order = np.argsort(sids)
            busy = np.zeros(len(at), bool)
            busy[order] = self.files.holding(sids[order]) | np.isin(sids[order], self.unflushed.sids())
            idle[at[busy]] = False
        return idle
