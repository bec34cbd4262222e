"""The samples this process holds in memory and has not committed yet: what a peer asks for.

A head read (cluster/head_protocol.py: remote read, the exemplars API) answers from a ``RecentView``
instead of the storage: the same read seam (select_series / estimate_samples / read_samples, read_histograms,
read_exemplars), over the heads and the snapshots being flushed only: float samples, native histograms and
exemplars. The view takes the heads and the file set version under the storage's swap lock, the
lock a flush commits and drops its snapshot under, so every sample not in the heads it reads is in
a committed version <= ``table_version``: a reader that reads the table at that version or newer
after this view sees each sample at least once (and de-duplicates by (sid, t)).
"""

from __future__ import annotations

import numpy as np

from ... import npsort
from ...limits.context import QueryContext
from ...model import Matcher, SampleBlock
from ..batch import SeriesSet
from ..memory.native_head import merge_exemplars, merge_histograms
from ..native_store import exemplar_bytes_each, histogram_bytes_each
from .merge import merge_parts


class RecentView:
    def __init__(self, storage) -> None:
        self._storage = storage
        self.heads, self.native_heads, self.table_version, self.uncommitted = storage.recent_heads()

    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None) -> SeriesSet:
        """The series of the table selection that have samples in memory overlapping the window
        (by their first and last sample there, as Prometheus's head selects by chunk time range), or
        histograms or exemplars in memory in the window."""
        ss = self._storage.select_series(matchers, start_ms, end_ms, ctx, limit, among=self._held_sids())
        if not len(ss):
            return ss
        keep = np.flatnonzero(self._in_window(ss.ids, start_ms, end_ms))
        return SeriesSet(ss.ids[keep], [ss.labels[i] for i in keep.tolist()], ss.label_sorted)  # a subset keeps order

    def select_ids(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                   ctx: QueryContext | None = None) -> np.ndarray:
        """The ids ``select_series`` selects, sorted, without label sets (cluster/head_columns.py)."""
        ids = self._storage.select_ids(matchers, start_ms, end_ms, ctx, among=self._held_sids())
        return ids[self._in_window(ids, start_ms, end_ms)] if len(ids) else ids

    def quick_for(self, metric: str, max_series: int) -> bool:
        """Whether a read of ``metric`` here sorts nothing and looks at few series: one head (no flush under way,
        whose union of series would be a sort), every append of it consolidated, no native samples, and at most
        ``max_series`` series of the metric known."""
        return (len(self.heads) == 1 and self.heads[0].consolidated() and not any(len(n) for n in self.native_heads)
                and self._storage.metric_series(metric) <= max_series)

    def labels_of_ids(self, ids: np.ndarray) -> list:
        return self._storage.labels_of_ids(ids)

    def _in_window(self, ids: np.ndarray, start_ms: int | None, end_ms: int | None) -> np.ndarray:
        """Per id: whether it holds samples in memory overlapping the window, or histograms or exemplars in it."""
        lo = np.iinfo(np.int64).min if start_ms is None else start_ms
        hi = np.iinfo(np.int64).max if end_ms is None else end_ms
        order = np.argsort(ids, kind="stable")
        ids_sorted = ids[order]
        held = np.zeros(len(ids), bool)
        for head in self.heads:
            for b in head.blocks():
                has, a, z = b.runs(ids_sorted)
                held[order[has]] |= (b.t[a] <= hi) & (b.t[z - 1] >= lo)
        for nat in self.native_heads:
            if len(nat):
                in_window = npsort.union(nat.histograms(ids_sorted, lo, hi).sid, nat.exemplars(ids_sorted, lo, hi).sid)
                held[order] |= npsort.isin(ids_sorted, in_window)
        return held

    def _held_sids(self) -> np.ndarray:
        """Every series with anything in memory (sorted): a head holds a few of the catalog's series."""
        parts = [held for head in self.heads if len(held := head.held_sids())]
        for nat in self.native_heads:
            if len(nat):
                h, e = nat.merged()
                parts += [h.sid, e.sid]
        if len(parts) == 1:
            return parts[0]
        return npsort.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        ids_sorted = npsort.unique(np.asarray(series.ids, np.int64))
        return sum(h.count(ids_sorted, start_ms, end_ms) for h in self.heads)

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        ids_sorted = npsort.unique(np.asarray(ids, np.int64))
        parts = self._blocks(ids_sorted, start_ms, end_ms)
        for b in parts:
            ctx.charge_loaded(len(b), "head read")
        ctx.check("sample merge")
        return merge_parts(ids_sorted, parts, start_ms, end_ms)

    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext):
        return self._native("histograms", merge_histograms, histogram_bytes_each, ids, start_ms, end_ms, ctx)

    def read_exemplars(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext):
        return self._native("exemplars", merge_exemplars, exemplar_bytes_each, ids, start_ms, end_ms, ctx)

    def _native(self, kind: str, merge, bytes_each, ids, start_ms: int, end_ms: int, ctx: QueryContext):
        ids_sorted = npsort.unique(np.asarray(ids, np.int64))
        parts = [getattr(h, kind)(ids_sorted, start_ms, end_ms) for h in self.native_heads]  # oldest first
        for p in parts:
            ctx.charge_loaded(len(p), f"head read ({kind})", bytes_each(p))
        return merge(parts)

    def _blocks(self, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> list[SampleBlock]:
        return [b for h in self.heads for b in h.select(ids_sorted, start_ms, end_ms) if len(b)]
