"""The in-memory head: samples acknowledged since the last flush, as numpy column chunks.

Appends add a chunk (no per-sample work). Reads consolidate pending chunks into one block
sorted by (sid, t) the first time they need to, so a query finds each series with a
binary search instead of scanning the whole head. A flush takes the head away as a frozen
snapshot that stays readable until its Parquet files are in place.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from ... import npsort
from ...model import SampleBlock


class HeadBlock:
    """Samples sorted by (sid, t), one per (sid, t): the first-written of exact duplicates
    (the sort is stable and inputs come in write order), so flushed files have none either."""

    def __init__(self, sid: np.ndarray, t: np.ndarray, v: np.ndarray) -> None:
        order = np.lexsort((t, sid))
        sid, t = sid[order], t[order]
        first = np.r_[True, (sid[1:] != sid[:-1]) | (t[1:] != t[:-1])]
        if not first.all():
            order, sid, t = order[first], sid[first], t[first]
        self.sid, self.t, self.v = sid, t, v[order]

    def __len__(self) -> int:
        return len(self.sid)

    @functools.cached_property
    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct series, sorted; where each one's run of samples starts, and a last entry = len): one pass
        over the sorted column (a block never changes)."""
        starts = npsort.run_starts(self.sid)
        return self.sid[starts], np.r_[starts, len(self.sid)]

    @property
    def sids(self) -> np.ndarray:
        return self._runs[0]

    def runs(self, ids_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(which of ``ids_sorted`` have samples here (bool), where their runs start and end): a binary search in
        the block's distinct series, a few times shorter than its samples, instead of two in the samples."""
        sids, bounds = self._runs
        if not len(sids):
            return np.zeros(len(ids_sorted), bool), np.empty(0, np.int64), np.empty(0, np.int64)
        pos = np.searchsorted(sids, ids_sorted)
        pos = np.minimum(pos, len(sids) - 1)
        found = sids[pos] == ids_sorted
        pos = pos[found]
        return found, bounds[pos], bounds[pos + 1]

    def select(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> SampleBlock:
        _, lo, hi = self.runs(ids_sorted)
        return select_runs(self.sid, self.t, self.v, lo, hi, start_ms, end_ms)

    def count(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> int:
        """``len(self.select(...))`` without gathering the samples when the window covers the series' runs
        (a head read's estimate; a query's window nearly always covers all of the head)."""
        _, lo, hi = self.runs(ids_sorted)
        if not len(lo):
            return 0
        if int(self.t[lo].min()) >= start_ms and int(self.t[hi - 1].max()) <= end_ms:
            return int((hi - lo).sum())
        return len(select_runs(self.sid, self.t, self.v, lo, hi, start_ms, end_ms))


def select_sorted(sid: np.ndarray, t: np.ndarray, v: np.ndarray, ids_sorted: np.ndarray,
                  start_ms: int, end_ms: int) -> SampleBlock:
    """The samples of ``ids_sorted`` in [start_ms, end_ms] from columns sorted by (sid, t):
    a binary search finds each series' run; the window is masked only when a run sticks out
    of it, and a single contiguous run is returned as views (no copy)."""
    lo = np.searchsorted(sid, ids_sorted, "left")
    hi = np.searchsorted(sid, ids_sorted, "right")
    keep = hi > lo
    return select_runs(sid, t, v, lo[keep], hi[keep], start_ms, end_ms)


def select_runs(sid: np.ndarray, t: np.ndarray, v: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                start_ms: int, end_ms: int) -> SampleBlock:
    """``select_sorted`` once each series' run [lo, hi) is known (ascending, none empty)."""
    if not len(lo):
        return SampleBlock.empty()
    if int(t[lo].min()) < start_ms or int(t[hi - 1].max()) > end_ms:
        lengths = hi - lo
        idx = np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
        inwin = (t[idx] >= start_ms) & (t[idx] <= end_ms)
        idx = idx[inwin]
    else:
        lengths = hi - lo
        if len(lo) == 1 or (lo[1:] == hi[:-1]).all():  # one contiguous range
            sl = slice(int(lo[0]), int(hi[-1]))
            return SampleBlock(sid[sl], t[sl], v[sl])
        idx = np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    return SampleBlock(sid[idx], t[idx], v[idx])


class Head:
    """Appends take ``_lock`` only to add a chunk. A read that finds pending chunks consolidates
    them under ``_sort_lock`` (one consolidation at a time, so no reader misses chunks another is
    sorting) and sorts without holding ``_lock``: ingest on the event loop never waits for a
    query's sort."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sort_lock = threading.Lock()
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._blocks: list[HeadBlock] = []
        self._samples = 0
        self._held: tuple[tuple[int, ...], np.ndarray] = ((), np.empty(0, np.int64))  # blocks' ids -> their series
        self.min_t = np.iinfo(np.int64).max
        self.max_t = np.iinfo(np.int64).min

    def __len__(self) -> int:
        return self._samples

    def append(self, sid: np.ndarray, t: np.ndarray, v: np.ndarray) -> None:
        if not len(sid):
            return
        with self._lock:
            self._chunks.append((sid, t, v))
            self._samples += len(sid)
            self.min_t = min(self.min_t, int(t.min()))
            self.max_t = max(self.max_t, int(t.max()))

    def consolidated(self) -> bool:
        """Whether a read would sort nothing first: every append is in a sorted block already."""
        return not self._chunks

    def blocks(self) -> list[HeadBlock]:
        """Sorted blocks covering everything appended so far (consolidates pending chunks)."""
        with self._sort_lock:
            with self._lock:
                pending = len(self._chunks)
                chunks, blocks = self._chunks[:pending], list(self._blocks)
            if chunks:
                blocks = self._consolidate(chunks, blocks)
                with self._lock:
                    del self._chunks[:pending]  # appends only ever add after them
                    self._blocks = blocks
            return list(blocks)

    def _consolidate(self, chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                     blocks: list[HeadBlock]) -> list[HeadBlock]:
        """The sort: chunks become one block, merged like an LSM tree -- a block is merged into its
        predecessor once it is at least half its size, so there are O(log n) blocks and each
        sample is re-sorted O(log n) times."""
        blocks = blocks + [HeadBlock(np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]),
                                     np.concatenate([c[2] for c in chunks]))]
        while len(blocks) > 1 and 2 * len(blocks[-1]) >= len(blocks[-2]):
            b2, b1 = blocks.pop(), blocks.pop()
            blocks.append(HeadBlock(np.concatenate([b1.sid, b2.sid]), np.concatenate([b1.t, b2.t]),
                                    np.concatenate([b1.v, b2.v])))
        return blocks

    def held_sids(self) -> np.ndarray:
        """Every series with a sample here, sorted; recomputed only when the blocks changed (a peer's or
        querier's every head read asks, and on a head of millions of samples a fresh union is a sort)."""
        blocks = self.blocks()
        key = tuple(id(b) for b in blocks)
        cached_key, cached = self._held
        if key != cached_key:
            cached = blocks[0].sids if len(blocks) == 1 else (
                npsort.unique(np.concatenate([b.sids for b in blocks])) if blocks else np.empty(0, np.int64))
            self._held = (key, cached)
        return cached

    def holding(self, ids_sorted: np.ndarray) -> np.ndarray:
        """Which of these series have a sample here (no sort, no consolidation)."""
        with self._lock:
            chunks, blocks = list(self._chunks), list(self._blocks)
        held = np.zeros(len(ids_sorted), bool)
        for b in blocks:
            held |= b.runs(ids_sorted)[0]
        for sid, _, _ in chunks:
            held |= npsort.isin(ids_sorted, sid)
        return held

    def select(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> list[SampleBlock]:
        if start_ms > self.max_t or end_ms < self.min_t:
            return []
        return [b.select(ids_sorted, start_ms, end_ms) for b in self.blocks()]

    def count(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> int:
        if start_ms > self.max_t or end_ms < self.min_t:
            return 0
        return sum(b.count(ids_sorted, start_ms, end_ms) for b in self.blocks())

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Everything, as one sorted (sid, t, v) triple (for a flush)."""
        blocks = self.blocks()
        if not blocks:
            e = np.empty(0, np.int64)
            return e, e, np.empty(0, np.float64)
        if len(blocks) == 1:
            b = blocks[0]
        else:
            b = HeadBlock(np.concatenate([x.sid for x in blocks]), np.concatenate([x.t for x in blocks]),
                          np.concatenate([x.v for x in blocks]))
        return b.sid, b.t, b.v
