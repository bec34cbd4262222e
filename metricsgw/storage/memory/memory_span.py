"""The time span of what this storage holds in memory, told to whoever listens (an ingest shard's extent board,
cluster/extent_board.py, which lets its query processes skip a head read whose window misses it)."""

from __future__ import annotations

from collections.abc import Callable

from ..fileset import FileSet


class MemorySpan:
    def __init__(self, files: FileSet) -> None:
        self.files = files
        # (min_t, max_t, table version) -> None; set by an ingest shard before its storage opens
        self.sink: Callable[[int, int, int], None] | None = None
        self.live = False  # set once the WAL is replayed: a span told before would miss what replay brings back

    def publish(self) -> None:
        """(Inside ``files.atomically()``, after a change of what memory holds, before a write is acknowledged.) The
        span of every sample, histogram and exemplar in the heads and the snapshots being flushed (empty: min_t >
        max_t), and the samples table version holding everything else this writer stored."""
        if self.sink is None or not self.live:
            return
        self.sink(*self.files.span(), self.files.version())
