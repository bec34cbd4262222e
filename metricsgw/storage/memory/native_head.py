"""The head of native histograms and exemplars: what was acknowledged since the last flush.

It sits beside the float head (head.py) and follows it: appended under the same lock as the WAL
record, swapped out by a flush at the same cut, kept readable in ``flushing`` until its files
are committed. Blobs stay in Arrow binary arrays, so selecting rows is an Arrow ``take``.

Duplicates: each (sid, t) is kept once, the first written, across head, flushing heads and files
(as the float samples are, and as Prometheus's exemplar storage refuses a second exemplar at a
series' newest timestamp).
"""

from __future__ import annotations

import threading
from dataclasses import fields

import numpy as np
import pyarrow as pa

from ... import npsort
from ..batch import ExemplarBlock, HistogramBlock, NativeSamples

_EMPTY_I64 = np.empty(0, np.int64)


def empty_histograms() -> HistogramBlock:
    return HistogramBlock(_EMPTY_I64, _EMPTY_I64, pa.array([], pa.binary()))


def empty_exemplars() -> ExemplarBlock:
    return ExemplarBlock(_EMPTY_I64, _EMPTY_I64, np.empty(0, np.float64), pa.array([], pa.binary()))


def first_written(order_key: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Row order sorting by (sid, t) and keeping the first row of each (sid, t); rows come in write order."""
    sid, t = order_key
    order = np.lexsort((t, sid))  # stable: among equal keys the earlier written comes first
    s, tt = sid[order], t[order]
    first = np.r_[True, (s[1:] != s[:-1]) | (tt[1:] != tt[:-1])] if len(order) else np.empty(0, bool)
    return order[first]


def _concat(parts: list):
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    # Blobs: the merged block's Arrow array, then the lists appends kept (converted here, all at once)
    arrays = [p for p in parts if isinstance(p, pa.Array)]
    lists = [p for p in parts if not isinstance(p, pa.Array)]
    if lists:
        arrays.append(pa.array([b for part in lists for b in part], pa.binary()))
    return pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]


def take(block, rows: np.ndarray):
    """The block's rows at these positions (numpy and Arrow columns alike)."""
    arrow_rows = pa.array(rows, pa.int64())
    return type(block)(**{f.name: (col.take(arrow_rows) if isinstance(col, pa.Array) else col[rows])
                          for f in fields(block) for col in [getattr(block, f.name)]})


def _merge(blocks: list, empty):
    """Blocks in write order -> one, sorted by (sid, t), each (sid, t) once (the first written)."""
    blocks = [b for b in blocks if len(b)]
    if not blocks:
        return empty()
    merged = type(blocks[0])(**{f.name: _concat([getattr(b, f.name) for b in blocks]) for f in fields(blocks[0])})
    return take(merged, first_written((merged.sid, merged.t)))


def merge_histograms(blocks: list[HistogramBlock]) -> HistogramBlock:
    return _merge(blocks, empty_histograms)


def merge_exemplars(blocks: list[ExemplarBlock]) -> ExemplarBlock:
    return _merge(blocks, empty_exemplars)


def rows_in(sid: np.ndarray, t: np.ndarray, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> np.ndarray:
    pos = np.minimum(np.searchsorted(ids_sorted, sid), max(len(ids_sorted) - 1, 0))
    hit = (ids_sorted[pos] == sid) if len(ids_sorted) else np.zeros(len(sid), bool)
    return np.flatnonzero(hit & (t >= start_ms) & (t <= end_ms))


class NativeHead:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hist: list[HistogramBlock] = []
        self._ex: list[ExemplarBlock] = []
        self._merged: tuple[HistogramBlock, ExemplarBlock] | None = None
        self.count = 0  # histograms + exemplars held
        self.min_t = np.iinfo(np.int64).max
        self.max_t = np.iinfo(np.int64).min

    def __len__(self) -> int:
        return self.count

    def append(self, nat: NativeSamples) -> None:
        with self._lock:
            if nat.histograms:
                # The blobs stay the request's bytes until a read or the flush merges the head: an Arrow array
                # per write cost ~10x more (fresh pool memory for every small array) than one per merge.
                self._hist.append(HistogramBlock(np.asarray(nat.hist_sid, np.int64), np.asarray(nat.hist_t, np.int64),
                                                 list(nat.hist_blob)))
                self.min_t = min(self.min_t, int(nat.hist_t.min()))
                self.max_t = max(self.max_t, int(nat.hist_t.max()))
            if nat.exemplars:
                self._ex.append(ExemplarBlock(np.asarray(nat.ex_sid, np.int64), np.asarray(nat.ex_t, np.int64),
                                              np.asarray(nat.ex_v, np.float64), list(nat.ex_labels)))
                self.min_t = min(self.min_t, int(nat.ex_t.min()))
                self.max_t = max(self.max_t, int(nat.ex_t.max()))
            self.count += nat.histograms + nat.exemplars
            self._merged = None

    def merged(self) -> tuple[HistogramBlock, ExemplarBlock]:
        """Everything held, sorted by (sid, t) and without duplicates (cached until the next append)."""
        with self._lock:
            if self._merged is None:
                self._hist = [merge_histograms(self._hist)] if self._hist else []
                self._ex = [merge_exemplars(self._ex)] if self._ex else []
                self._merged = (self._hist[0] if self._hist else empty_histograms(),
                                self._ex[0] if self._ex else empty_exemplars())
            return self._merged

    def histograms(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> HistogramBlock:
        if not self.count:  # no native data at all (the usual case): skip the merge and the Arrow take
            return empty_histograms()
        h = self.merged()[0]
        return take(h, rows_in(h.sid, h.t, ids_sorted, start_ms, end_ms))

    def exemplars(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> ExemplarBlock:
        if not self.count:
            return empty_exemplars()
        e = self.merged()[1]
        return take(e, rows_in(e.sid, e.t, ids_sorted, start_ms, end_ms))

    def holding(self, ids_sorted: np.ndarray) -> np.ndarray:
        h, e = self.merged()
        return npsort.isin(ids_sorted, h.sid) | npsort.isin(ids_sorted, e.sid)
