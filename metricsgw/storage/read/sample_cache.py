"""The query-side sample cache: decoded Parquet samples of recently read (file, metric) pairs,
and their merge across a query's files, kept compact.

A dashboard re-reads the same metrics on every refresh; served from here, a read is a binary
search over series instead of a Parquet scan. Entries are ``CachedSamples``: each series' id
once with the start of its run (not once per sample) and times as int32 milliseconds from the
entry's first time when its span allows, so a sample costs 12 bytes instead of SampleBlock's
24 and twice as many metrics fit in the same share of --query.max-memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ...model import SampleBlock

# What a cached sample costs (t as int32 + v), for sizing fills before they are made.
CACHED_SAMPLE_BYTES = 12
_INT32_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True)
class CachedSamples:
    """Samples sorted by (sid, t), one per (sid, t): series ``sids[i]`` owns ``t[starts[i]:starts[i + 1]]``
    (ms minus ``base``) and the same slice of ``v``."""

    sids: np.ndarray  # int64, ascending, unique
    starts: np.ndarray  # int64 [len(sids) + 1]
    base: int
    t: np.ndarray  # int32 (or int64 when the span does not fit), t - base
    v: np.ndarray  # float64, bit-exact

    @classmethod
    def of(cls, b: SampleBlock) -> "CachedSamples":
        """``b`` (sorted by (sid, t)) in cache form, its arrays frozen: every query shares them."""
        if not len(b):
            return cls(np.empty(0, np.int64), np.zeros(1, np.int64), 0, np.empty(0, np.int32), np.empty(0))
        first = np.flatnonzero(np.r_[True, b.sid[1:] != b.sid[:-1]])
        base = int(b.t.min())
        t = b.t - base
        if int(t.max()) <= _INT32_MAX:
            t = t.astype(np.int32)
        out = cls(b.sid[first], np.append(first, len(b)).astype(np.int64), base, t, b.v)
        for a in (out.sids, out.starts, out.t, out.v):
            a.flags.writeable = False
        return out

    def __len__(self) -> int:
        return len(self.v)

    @property
    def nbytes(self) -> int:
        return self.sids.nbytes + self.starts.nbytes + self.t.nbytes + self.v.nbytes

    def block(self) -> SampleBlock:
        """Every sample as a SampleBlock."""
        return SampleBlock(np.repeat(self.sids, np.diff(self.starts)), self.t.astype(np.int64) + self.base, self.v)

    def select(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> SampleBlock:
        """The samples of ``ids_sorted`` (ascending) in [start_ms, end_ms], as a SampleBlock."""
        k = len(self.sids)
        if k == 0 or not len(ids_sorted):
            return SampleBlock.empty()
        # the window in the entry's own time unit, clipped so the comparison stays in t's range
        lo_t = min(max(start_ms - self.base, -1), _INT32_MAX)
        hi_t = min(max(end_ms - self.base, -1), _INT32_MAX)
        if self.t.dtype == np.int64:
            lo_t, hi_t = start_ms - self.base, end_ms - self.base
        if len(ids_sorted) == k and np.array_equal(ids_sorted, self.sids):  # the whole entry
            rows = None
            t, v, counts = self.t, self.v, np.diff(self.starts)
        else:
            pos = np.searchsorted(self.sids, ids_sorted)
            found = pos < k
            found[found] = self.sids[pos[found]] == ids_sorted[found]
            rows = pos[found]
            if not len(rows):
                return SampleBlock.empty()
            lo, hi = self.starts[rows], self.starts[rows + 1]
            counts = hi - lo
            idx = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
            t, v = self.t[idx], self.v[idx]
        sids = self.sids if rows is None else self.sids[rows]
        if len(t) and (int(t.min()) < lo_t or int(t.max()) > hi_t):
            keep = (t >= lo_t) & (t <= hi_t)
            kept = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
            ends = np.cumsum(counts)
            counts = kept[ends] - kept[ends - counts]  # each run's samples in the window
            t, v = t[keep], v[keep]
        return SampleBlock(np.repeat(sids, counts), t.astype(np.int64) + self.base, v)


class SampleCache:
    """(file path, metric, "*" or a digest of the series) -> those samples in that (immutable)
    file; and (tuple of file paths, metric, ...) -> the merge of those files. ``CachedSamples`` each.

    Least recently used entries go first once ``max_bytes`` is exceeded; an entry bigger than a
    quarter of it is not kept. Files replaced by compaction get new paths, so entries never go
    stale; they are dropped when their file leaves the file list."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, CachedSamples] = OrderedDict()
        self.bytes = 0

    def get(self, key: tuple) -> CachedSamples | None:
        with self._lock:
            b = self._items.get(key)
            if b is not None:
                self._items.move_to_end(key)
            return b

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is held, without counting as a use (the read planner asks before reading)."""
        with self._lock:
            return key in self._items

    def put(self, key: tuple, b: CachedSamples) -> None:
        size = b.nbytes
        if size > self.max_bytes // 4:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old.nbytes
            self._items[key] = b
            self.bytes += size
            while self.bytes > self.max_bytes and self._items:
                _, gone = self._items.popitem(last=False)
                self.bytes -= gone.nbytes

    def stats(self) -> tuple[int, int, set[str]]:
        with self._lock:
            files = {p for k in self._items for p in ((k[0],) if isinstance(k[0], str) else k[0])}
            return len(self._items), self.bytes, files

    def retain(self, paths: set[str]) -> None:
        """Drop entries of files no longer listed (a merged entry names all its files)."""
        def gone(k) -> bool:
            return k[0] not in paths if isinstance(k[0], str) else not paths.issuperset(k[0])

        with self._lock:
            for key in [k for k in self._items if gone(k)]:
                self.bytes -= self._items.pop(key).nbytes
