"""Retention's share of the storage: the oldest sample not yet committed, and forgetting the series that
have no sample left once retention deleted the older partitions (a part of ``Storage``: it swaps the
catalog book's catalog inside the file set's lock, which appends take)."""

from __future__ import annotations

import logging

import numpy as np

from ..catalog.book import CatalogBook
from ..catalog.catalog import Catalog
from ..fileset import FileSet

log = logging.getLogger(__name__)


class RetentionShare:
    def __init__(self, files: FileSet, book: CatalogBook, metadata_by_metric: dict) -> None:
        self.files = files
        self.book = book
        self.metadata_by_metric = metadata_by_metric  # Storage's: metrics left with no series lose theirs

    def unflushed_min_t(self) -> int:
        """The oldest sample not yet in a committed file (int64 max when there is none)."""
        with self.files.atomically():
            return self.files.min_t()

    def drop_series_before(self, horizon_ms: int) -> np.ndarray:
        """Forget the series with no sample left: every sample on disk is at or after ``horizon_ms``
        (retention just deleted the older partitions), theirs are all older, and none is in memory.
        The catalog is rebuilt without them (its label caches go with it) while appends go on, and
        swapped in under the lock appends take; spans are clamped to the oldest sample kept, and
        metadata of metrics left with no series goes. Returns their sids (the caller rewrites the
        series files); callers caching sids see ``series_epoch`` move."""
        none = np.empty(0, np.int64)
        with self.files.atomically():
            cat = self.book.catalog
            dead = self._dead_series(cat, horizon_ms, clamp=True)
        if not dead.any():
            return none
        new = cat.without(dead)  # the slow part, outside the lock: ingest goes on
        with self.files.atomically():
            at = np.flatnonzero(dead)
            if not np.array_equal(np.flatnonzero(self._dead_series(cat, horizon_ms)[: len(dead)]), at):
                return none  # a write reached one of them meanwhile: keep them all, decide again next pass
            cat.catch_up(new)
            sids = cat.sids.a[at].copy()
            self.book.replace(new, sids)
            for name in set(cat.metrics) - set(new.metrics):
                self.metadata_by_metric.pop(name, None)
        self.book.discard_checkpoint()
        log.info("retention: %d series with no samples left dropped, %d kept", len(sids), len(new))
        return sids

    def drop_forgotten_metadata(self, on_disk: set[str]) -> None:
        """Metadata of the metrics the head window forgot every series of goes once none of their series is left on
        disk (``on_disk``: the metrics the archive holds), as it goes with the last series retention drops."""
        with self.files.atomically():
            gone = {name for name in self.book.forgotten_metrics
                    if name in self.book.catalog.metrics or name not in on_disk}
            for name in gone - set(self.book.catalog.metrics):
                self.metadata_by_metric.pop(name, None)
            self.book.forgotten_metrics -= gone

    def _dead_series(self, cat: Catalog, horizon_ms: int, clamp: bool = False) -> np.ndarray:
        """Mask over ``cat``'s dense indexes: series with a span, all of it before ``horizon_ms``, and
        no sample in memory. Inside ``files.atomically()``. ``clamp`` moves span starts up to the oldest
        sample kept (on disk or in memory), so estimates and windowed metadata calls stay true."""
        first, last = cat.first_ms.view, cat.last_ms.view[: len(cat.first_ms.view)]
        spanned = first != np.iinfo(np.int64).max  # a series never seen with a sample keeps its entry
        dead = spanned & (last < horizon_ms)
        at = np.flatnonzero(dead)
        if len(at):
            sids = cat.sids.a[at]
            order = np.argsort(sids)
            held = np.zeros(len(at), bool)
            held[order] = self.files.holding(sids[order])
            dead[at[held]] = False
        if clamp:
            floor = min(horizon_ms, self.files.min_t())
            np.maximum(first, floor, out=first, where=spanned & ~dead)
        return dead
