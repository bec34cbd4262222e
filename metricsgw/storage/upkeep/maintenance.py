"""What the flusher does after each flush: retention, the head window, compaction, side-table merges.

Each step ends in a defined state whatever fails (disk full, EIO, a corrupt input): its files are
written in a table transaction, so a failure leaves no partial file and changes nothing; the
step is retried at the next pass; every failure counts in ``metricsgw_compaction_failures_total``;
the log says it once when a step starts failing (with the error) and once when it recovers, not at
every retry. Steps are independent: a failing compaction does not stop retention.

Retention deletes whole partitions whose time is past ``--storage.retention.time``, then drops the
series left with no sample (storage.retention.drop_series_before) from memory at once and from the series
and spans files in the same pass. If rewriting those files fails, the drop is remembered and the
rewrite retried (a series that comes back meanwhile is kept: it is in memory again). Series the head window
forgot (upkeep/idle_series.py) are purged from those files the same way once their partitions are retired.
"""

from __future__ import annotations

import logging

import numpy as np

from ... import npsort
from .. import crashpoints
from .compact import compact_partitions, compact_side_tables, purge_side_tables

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(self, storage) -> None:
        self.storage = storage
        self.failing: dict[str, str] = {}  # step -> its last error, while it keeps failing
        self._purge = np.empty(0, np.int64)  # dropped sids still to remove from the side files

    def run(self) -> None:
        # Retention first: no point compacting partitions it is about to delete.
        for step, fn in (("retention", self.apply_retention),
                         ("head window", self.storage.idle.forget_idle),
                         ("compaction", lambda: compact_partitions(self.storage)),
                         ("histogram compaction", self.storage.native.compact),
                         ("side-table compaction", lambda: compact_side_tables(self.storage))):
            if self.storage.stopping.is_set():
                return
            try:
                fn()
            except Exception as err:  # noqa: BLE001 - any failure: counted, logged once, retried
                self._failed(step, err)
            else:
                if self.failing.pop(step, None) is not None:
                    log.warning("%s works again", step)

    def data_floor(self) -> int:
        """The oldest sample, histogram or exemplar on disk, of every writer's files: the catalog holds other writers'
        series too when it follows them (int64 max when there is none)."""
        st = self.storage
        return min([f.min_t for f in st.table.current.samples] + [st.native.files_min_t()])

    def _failed(self, step: str, err: Exception) -> None:
        tel = self.storage.telemetry
        if tel is not None:
            tel.compaction_failures.inc()
        if step not in self.failing:
            log.error("%s failed; retried at every flush from now on, logged again when it works: %s",
                      step, err, exc_info=err)
        self.failing[step] = str(err)

    def apply_retention(self) -> None:
        st = self.storage
        cutoff = int(st.clock() * 1000) - st.retention_ms
        own = [f for f in st.table.current.samples if f.writer == st.writer_id]  # others drop their own
        old = [f.path for f in own if f.partition_ms + st.partition_ms < cutoff]
        old += st.native.expired_files(cutoff)  # this writer's histograms and exemplars of those partitions
        if old:
            with st.table.transaction() as tx:
                tx.retire(old)  # deleted once no running query holds them
                tx.commit()
            crashpoints.reached("retention.removed")
            log.info("retention: %d partition file(s) older than %d ms retired", len(old), st.retention_ms)
        # Nothing at or after the cutoff was deleted by retention: a series written since is never dropped, even when
        # the files holding it are not in this snapshot yet (another writer commits its series and spans before its
        # samples; with an empty snapshot the floor alone would drop every series followed).
        horizon = min(self.data_floor(), cutoff)
        dropped = st.retention.drop_series_before(horizon)
        if len(dropped):
            self._purge = npsort.union(self._purge, dropped)
        if old:  # series the head window forgot whose samples went with those partitions, and their metadata
            self._purge = npsort.union(self._purge, st.archive.expired(horizon))
            if st.book.forgotten_metrics:
                st.retention.drop_forgotten_metadata(st.archive.metric_names())
        if len(self._purge):
            gone = self._purge[st.catalog.lookup(self._purge) < 0]  # one that came back keeps its records
            if len(gone):
                purge_side_tables(st, gone, min(horizon, st.retention.unflushed_min_t()))
            self._purge = np.empty(0, np.int64)
