"""The catalog in use and the bookkeeping that moves with it: how many series its last checkpoint holds, the
series retention dropped or the head window forgot (an epoch and the last few sets, for callers that cache series
ids), and how far back the forgotten series reach (``forgotten_until``: reads over older times ask the archive).

Retention replaces the catalog with a smaller one while reads go on, so a reader takes ``book.catalog`` once per
call; the swap and the epoch move together inside the file set's ``atomically()``.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from ..fileset import FileSet
from . import catalog_checkpoint
from .catalog import Catalog

log = logging.getLogger(__name__)

_DROPS_KEPT = 8  # epochs whose dropped sids dropped_since can still tell
# What a restart may have to redo beyond its checkpoint: splitting this many series keys (~8 us each: 0.8 s)...
UNCOVERED_SERIES = 100_000
# ...or reading this many side files (a spans file names every series its flush wrote: 2.7M at the seed's scale)
UNCOVERED_SIDE_FILES = 3
# Checkpoints for those two take at most this share of a core: at 2.7M series one takes ~1.6 s (0.15 s of it
# holding appends back while the arrays are copied), so they are then at least ~55 s apart (pod churn)...
CPU_SHARE = 0.03
# ...or this share once no series came since the last look (a burst of new series is over: at 2.7M series a
# restart split 150k keys a checkpoint lacked for up to 55 s after one, 1.7 s in each process)
SETTLED_CPU_SHARE = 0.10
NONE = int(np.iinfo(np.int64).min)  # forgotten_until while memory forgot nothing


class CatalogBook:
    def __init__(self, files: FileSet, writer_dir: str, writer_id: str) -> None:
        self.catalog = Catalog()
        self.epoch = 0  # bumped each time retention drops series or the head window forgets some
        # The newest sample time of any series memory forgot (upkeep/idle_series.py), NONE while it forgot none: a
        # read whose window starts after it finds every series it needs in the catalog; an older one asks the
        # archive (catalog/archive.py) too. Saved in the checkpoint, which is what a restart's memory comes from.
        self.forgotten_until = NONE
        # Metrics the head window forgot every series of: their metadata goes once retention leaves none on disk
        self.forgotten_metrics: set[str] = set()
        self._files = files
        self._writer_dir = writer_dir
        self._writer_id = writer_id
        self._checkpointed = 0  # series in the last checkpoint written or loaded
        self._covered = 0  # the last side file sequence it covers
        self._last_save = time.monotonic()  # of the last checkpoint written (or start-up)
        self._save_s = 0.0  # what writing it took
        self._seen = 0  # series in the catalog at the last look (checkpoint() call)
        self._dropped: list[tuple[int, np.ndarray]] = []  # (epoch, sids dropped then), the last few

    # ---------------------------------------------------------------- retention's drops
    def replace(self, new: Catalog, dropped: np.ndarray) -> None:
        """(Inside ``files.atomically()``.) ``new`` is the catalog from now on, without the ``dropped`` sids."""
        self.catalog = new
        self.epoch += 1
        self._dropped = self._dropped[1 - _DROPS_KEPT:] + [(self.epoch, dropped)]

    def forget(self, new: Catalog, forgotten: np.ndarray, until_ms: int) -> None:
        """(Inside ``files.atomically()``.) As ``replace``, for series the head window forgot: they stay on disk, and
        the newest sample of any of them is ``until_ms``. The next checkpoint is measured from the smaller catalog."""
        self.forgotten_metrics |= set(self.catalog.metrics) - set(new.metrics)
        self.replace(new, forgotten)
        self.forgotten_until = max(self.forgotten_until, until_ms)
        self._checkpointed = min(self._checkpointed, len(new))

    def dropped_since(self, epoch: int) -> np.ndarray | None:
        """(Inside ``files.atomically()``.) Sids dropped after ``epoch``; None if that is too long ago to say."""
        if epoch == self.epoch:
            return np.empty(0, np.int64)
        if not self._dropped or self._dropped[0][0] > epoch + 1:
            return None
        return np.concatenate([sids for e, sids in self._dropped if e > epoch])

    # ---------------------------------------------------------------- checkpoint
    @property
    def checkpointed(self) -> int:
        """Series in the last checkpoint loaded, adopted or written."""
        return self._checkpointed

    def load_checkpoint(self) -> int:
        """The catalog of this writer's checkpoint, if it has one (start-up); returns the last side file
        sequence it covers (0 without one)."""
        loaded = catalog_checkpoint.load(self._writer_dir)
        if loaded is None:
            return 0
        self.catalog, covered, self.forgotten_until = loaded
        self._checkpointed, self._covered = len(self.catalog), covered
        return covered

    def checkpoint_size(self, writer_id: str) -> int:
        """Bytes of another writer's checkpoint in this directory (0: none here, as for a writer on another host)."""
        return catalog_checkpoint.size(os.path.join(os.path.dirname(self._writer_dir), writer_id))

    def adopt_checkpoint(self, writer_id: str) -> int | None:
        """(At start-up, while this catalog is empty.) Another writer's checkpoint as this catalog: a query process
        starting beside its ingest shard loads the shard's arrays instead of splitting every key of its series
        files. Returns the last side file sequence of that writer it covers (None: none usable, nothing changed)."""
        loaded = catalog_checkpoint.load(os.path.join(os.path.dirname(self._writer_dir), writer_id))
        if loaded is None or len(self.catalog):
            return None
        self.catalog, covered, self.forgotten_until = loaded
        self._checkpointed = len(self.catalog)
        return covered

    def checkpoint(self, min_interval_s: float = 0.0, force: bool = False) -> None:
        """Save the catalog as arrays, so a restart loads them instead of parsing every series key and reading
        every side file again: once the catalog grew by a tenth (at most every ``min_interval_s``), or a restart
        would redo more than ``UNCOVERED_SERIES`` keys or ``UNCOVERED_SIDE_FILES`` side files of this writer's
        (within ``CPU_SHARE`` of a core too, ``SETTLED_CPU_SHARE`` once no series came since the last call); ``force`` (a clean stop): whenever it would redo anything. Failing to is not a failed
        flush: the series files hold everything, the next start-up is just slower. Called in the flusher after a
        commit, between flushes (a young gateway's series are all in its WAL, and a restart that splits a million
        keys takes ~8 s against ~2 s from a checkpoint), and at a clean stop."""
        cat = self.catalog
        uncovered = [p for kind in ("series", "spans") for p in self._files.table.current.own(kind, self._writer_id)
                     if catalog_checkpoint.file_seq(p) > self._covered]
        new = len(cat) - self._checkpointed
        settled, self._seen = len(cat) == self._seen, len(cat)
        if force:  # what this writer flushed and no checkpoint holds (a process that only follows flushes none)
            if not uncovered:
                return
        elif new >= max(1, len(cat) // 10):  # grown by a tenth (a young gateway's): soon, whatever it costs
            if time.monotonic() - self._last_save < min_interval_s:
                return
        elif new >= UNCOVERED_SERIES or len(uncovered) >= UNCOVERED_SIDE_FILES:  # within its share of a core
            share = SETTLED_CPU_SHARE if settled else CPU_SHARE
            if time.monotonic() - self._last_save < max(min_interval_s, self._save_s / share):
                return
        else:
            return
        t0 = time.monotonic()
        with self._files.atomically():  # no series is added meanwhile (append registers them under it)
            snap = catalog_checkpoint.snapshot(self.catalog)
            snap["forgotten_until"] = self.forgotten_until  # the series it lacks (but the files hold) are older
        # The flusher is the only thread of this process that commits: this writer's side files listed now
        # are exactly those whose series and spans the snapshot holds.
        covered = catalog_checkpoint.covered_seq(self._files.table.current, self._writer_id)
        try:
            catalog_checkpoint.save(self._writer_dir, snap, covered)
            self._checkpointed, self._covered = len(snap["sids"]), covered
        except OSError as err:
            log.warning("series table checkpoint not written: %s", err)
        self._last_save = time.monotonic()
        self._save_s = self._last_save - t0

    def discard_checkpoint(self) -> None:
        """After retention dropped series the checkpoint still holds: a restart must not bring them back.
        The next flush writes a new one."""
        catalog_checkpoint.discard(self._writer_dir)
        self._checkpointed = self._covered = 0
