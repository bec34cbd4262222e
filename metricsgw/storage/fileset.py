"""The file set: what a read sees as one (the table's snapshot, the heads being flushed, the head being filled),
and the one lock that keeps it one.

A sample moves from the head to a file in steps: an append adds it to the head; a flush cuts the head off into
``flushing`` at its WAL cut, writes and commits its files, then drops it. A read that took the head, the heads
being flushed and a pinned snapshot at one moment sees each sample exactly once whichever step it is at, so every
step and every view happens under this lock. Storage's own state that must move in step with the file set (the
catalog an append registers series in, retention's catalog swap, the series a flush takes) changes inside
``atomically()`` as well. Only this class holds the lock; every other method here is called inside
``atomically()`` (the counts excepted: they are hints, read without it).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from .batch import NativeSamples
from .files.table import Pin, Table
from .memory.head import Head
from .memory.native_head import NativeHead


@dataclass(frozen=True)
class Cut:
    """What one flush writes, oldest first (heads of flushes that failed come before the one cut now)."""
    heads: list[Head]
    native_heads: list[NativeHead]


@dataclass(frozen=True)
class View:
    """A read's consistent view: the pinned snapshot (its files are not deleted while pinned) and the heads
    holding what is not in it, oldest first."""
    pin: Pin
    heads: list[Head]
    native_heads: list[NativeHead]


class FileSet:
    def __init__(self, table: Table) -> None:
        self.table = table
        self._swap_lock = threading.Lock()
        self._head = Head()
        self._flushing: list[Head] = []
        self._native_head = NativeHead()
        self._native_flushing: list[NativeHead] = []

    def atomically(self) -> AbstractContextManager:
        """The lock a change or a view of the file set is made under (not re-entrant)."""
        return self._swap_lock

    # ---------------------------------------------------------------- appends
    def append(self, sid: np.ndarray, t: np.ndarray, v: np.ndarray) -> None:
        self._head.append(sid, t, v)

    def append_native(self, nat: NativeSamples) -> None:
        self._native_head.append(nat)

    # ---------------------------------------------------------------- flush
    def pending(self) -> bool:
        """Whether anything in memory is waiting for a flush."""
        return bool(len(self._head) or self._flushing or len(self._native_head) or self._native_flushing)

    def cut(self) -> Cut:
        """At the flush's WAL cut: the heads become snapshots being flushed; what the flush writes."""
        if len(self._head):
            self._flushing.append(self._head)
            self._head = Head()
        if len(self._native_head):
            self._native_flushing.append(self._native_head)
            self._native_head = NativeHead()
        return Cut(list(self._flushing), list(self._native_flushing))

    def committed(self, cut: Cut) -> None:
        """After the commit of ``cut``'s files (the table's snapshot holds them now): its heads leave memory."""
        self._flushing = [h for h in self._flushing if h not in cut.heads]
        self._native_flushing = [h for h in self._native_flushing if h not in cut.native_heads]

    # ---------------------------------------------------------------- reads
    def heads(self) -> tuple[list[Head], list[NativeHead]]:
        """The float and the native heads holding what the table's snapshot does not, oldest first."""
        return [*self._flushing, self._head], [*self._native_flushing, self._native_head]

    def view(self) -> View:
        return View(self.table.pin(), *self.heads())

    def version(self) -> int:
        """The samples table version the heads' samples are not in (this writer's commits up to it are)."""
        return self.table.current.table_version

    def span(self) -> tuple[int, int]:
        """(min_t, max_t) of every sample, histogram and exemplar in memory (empty: min_t > max_t)."""
        heads = [*self._flushing, self._head, *self._native_flushing, self._native_head]
        return min(h.min_t for h in heads), max(h.max_t for h in heads)

    # ---------------------------------------------------------------- retention
    def min_t(self) -> int:
        """The oldest sample, histogram or exemplar held in memory (int64 max when none)."""
        return self.span()[0]

    def holding(self, ids_sorted: np.ndarray) -> np.ndarray:
        """Which of these series (sorted ids) have anything in memory."""
        held = np.zeros(len(ids_sorted), bool)
        for h in [*self._flushing, self._head, *self._native_flushing, self._native_head]:
            if len(h):
                held |= h.holding(ids_sorted)
        return held

    # ---------------------------------------------------------------- counts (hints, without the lock)
    def in_head(self) -> int:
        """Samples, histograms and exemplars in the heads being filled (a flush is due past a bound)."""
        return len(self._head) + len(self._native_head)

    def held(self) -> int:
        """Samples, histograms and exemplars not yet in a committed file (appends are refused past a bound)."""
        return self.in_head() + sum(map(len, self._flushing)) + sum(map(len, self._native_flushing))

    def head_samples(self) -> int:
        """Float samples in the head being filled (what the head_samples gauge shows)."""
        return len(self._head)

    def flushing(self) -> int:
        """Snapshots cut off and not committed yet (flushes that failed keep theirs here)."""
        return len(self._flushing) + len(self._native_flushing)
