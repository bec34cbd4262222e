"""The time span of what this storage holds in memory, told to whoever listens (an ingest shard's extent board,
cluster/extent_board.py, which lets its query processes skip a head read whose window misses it)."""

from __future__ import annotations

from collections.abc import Callable


class MemorySpan:
    # (min_t, max_t, table version) -> None; set by an ingest shard before its storage opens
    extent_sink: Callable[[int, int, int], None] | None = None

    def _publish_span(self) -> None:
        """(Inside ``files.atomically()``, after a change of what memory holds, before a write is acknowledged.) The
        span of every sample, histogram and exemplar in the heads and the snapshots being flushed (empty: min_t >
        max_t), and the samples table version holding everything else this writer stored."""
        if self.extent_sink is None or not self.ready:
            return
        self.extent_sink(*self.files.span(), self.files.version())
