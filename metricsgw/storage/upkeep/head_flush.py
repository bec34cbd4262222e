"""The flush: the heads cut with the WAL, written as Parquet partitions and series files, committed to the
table in one Delta commit that carries the WAL cut, then the flushed WAL segments dropped. One at a time
(``_lock``): the flusher thread runs it, and close() runs the last one.
"""

from __future__ import annotations

import threading
import time

from ...malloc import release_free_memory
from .. import crashpoints
from ..files import flush_files, metadata_file, parquet_io
from ..files.table import Transaction
from ..memory.head import Head


class HeadFlush:
    def __init__(self, storage) -> None:
        self.storage = storage
        self._lock = threading.Lock()

    def run(self) -> None:
        """Head -> Parquet partitions + series table, committed to the table with the WAL cut; then drop
        the flushed WAL segments. A failed flush leaves no file (the transaction deletes what it wrote):
        its snapshot stays readable in ``flushing`` and its new series stay pending, and the next flush
        writes them first, in the same commit as the head it cuts (its WAL cut covers theirs). So the
        committed cut never passes a WAL segment whose samples are not committed. While flushes fail, the
        samples held in memory (head and failed snapshots) are bounded: ``append`` refuses past the limit."""
        st = self.storage
        with self._lock:
            t0 = time.perf_counter()
            with st.files.atomically():
                if not st.files.pending() and not len(st.unflushed):
                    return
                cut = st.wal.cut()
                crashpoints.reached("flush.cut")
                snaps = st.files.cut()
                new_series = st.unflushed.take()
                meta = {k: list(v) for k, v in st.metadata_by_metric.items()}
            try:
                with st.table.transaction() as tx:
                    for snap in snaps.heads:  # older ones are flushes that failed: in write order
                        self._write_snapshot(tx, snap)
                    st.native.write(tx, snaps.native_heads)
                    if len(new_series):
                        path, _ = tx.new_path("series")
                        parquet_io.write_series(path, new_series.columns())
                        tx.add_side("series", path)
                    crashpoints.reached("flush.files")
                    metadata_file.write(st.writer_dir, meta)
                    tx.commit(wal_cut=cut)  # the cut rides in the samples commit: the WAL marker
                    with st.files.atomically():
                        st.files.committed(snaps)
                        st.unflushed.committed()
                        st.span.publish()
            except BaseException:
                with st.files.atomically():
                    st.unflushed.put_back(new_series)
                raise
            crashpoints.reached("flush.marker")
            st.wal.remove_upto(cut)
            st.book.checkpoint()
            release_free_memory()
            if st.telemetry:
                st.telemetry.flush_duration.observe(time.perf_counter() - t0)
                st.telemetry.head_samples.set(st.files.head_samples())

    def _write_snapshot(self, tx: Transaction, snap: Head) -> None:
        st = self.storage
        sid, t, v = snap.columns()
        if len(sid):
            st.samples.learn_interval(sid, t)
            flush_files.write_head(tx, sid, t, v, st.catalog, st.partition_ms, st.writer_id)

