"""The flusher: the storage's one background thread. It flushes when a flush is due (by time or by the head's
size), then runs maintenance; between flushes it follows other writers and deletes retired files no query holds.
It is the only thread of this process that commits, so compaction may flush between its chunks (``flush_if_due``)."""

from __future__ import annotations

import logging
import os
import threading
import time

from ...malloc import release_free_memory

log = logging.getLogger(__name__)

FLUSH_RETRY_S = 5.0  # a failed flush is retried this soon
CHECKPOINT_BETWEEN_FLUSHES_S = 10.0  # a growing series table is checkpointed at most this often between flushes (0.4 s of CPU at 1M series)


class Flusher:
    def __init__(self, storage, interval_s: float, max_samples: int) -> None:
        self.storage = storage
        self.interval_s = interval_s
        self.max_samples = max_samples  # in the heads being filled: a flush is due past it
        self.thread: threading.Thread | None = None  # flush_if_due flushes only in it
        self._last = time.monotonic()  # of the last flush (or failed one's retry schedule)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="flusher", daemon=True)
        self.thread.start()

    def join(self) -> None:
        """Wait for the thread to end (``storage.stopping`` is set): never abandoned while it uses the files."""
        if self.thread:
            while self.thread.is_alive():
                self.thread.join(timeout=30)
                if self.thread.is_alive():
                    log.warning("shutdown: waiting for the flusher to finish its current step")

    def flush_if_due(self) -> None:
        """Flush now if the flusher would: compaction (in the flusher thread) calls it between the chunks it
        writes, so a long merge never holds the head back until writes are refused as "head is full"."""
        if threading.current_thread() is self.thread and not self.storage.stopping.is_set() and self._due():
            self._flush_now()

    def _loop(self) -> None:
        st = self.storage
        self._last = time.monotonic()
        while not st.stopping.wait(1.0):
            self._observe_free_bytes()
            if self._due():
                self._flush_now()
                st.maintenance.run()  # retention, compaction, side tables: each retried on its own
                release_free_memory()  # compaction's buffers too
            elif len(st.unflushed):  # series this process wrote: a query process that only follows writes none
                st.book.checkpoint(CHECKPOINT_BETWEEN_FLUSHES_S)
            if st.follower.due():
                st.follower.step()
            st.table.collect()  # removed files no query holds any more, past the vacuum delay
            if st.telemetry:
                st.telemetry.active_series.set(st.active_series())

    def _due(self) -> bool:
        return (time.monotonic() - self._last >= self.interval_s
                or self.storage.files.in_head() >= self.max_samples)

    def _flush_now(self) -> None:
        if self._step():
            self._last = time.monotonic()
        else:  # retry soon (space may come back any moment), not a whole interval later
            self._last = time.monotonic() - self.interval_s + min(self.interval_s, FLUSH_RETRY_S)

    def _step(self) -> bool:
        try:
            self.storage.flush()
            return True
        except Exception:
            log.exception("flush failed; the samples stay in the WAL and in memory, retrying in %ss", FLUSH_RETRY_S)
            if self.storage.telemetry:
                self.storage.telemetry.flush_failures.inc()
            return False

    def _observe_free_bytes(self) -> None:
        tel = self.storage.telemetry
        if tel:
            try:
                st = os.statvfs(self.storage.path)
                tel.storage_free_bytes.set(st.f_bavail * st.f_frsize)
            except OSError:
                pass
