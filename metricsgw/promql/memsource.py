"""An in-memory sample source with the storage read interface, for tests and golden scripts.

It is a SampleReader of the read seam (storage/seam.py): the three read methods the engine may use, with the
same types and ordering guarantees as the DuckDB storage (samples sorted by (sid, t), one per (sid, t)); and a
HistogramReader (histogram_metrics, read_histograms) for native histograms, held as their remote-write bytes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import npsort
from ..limits.context import QueryContext
from ..model import METRIC_NAME, Labels, Matcher, SampleBlock, canonical, labels_match, series_id
from ..storage.batch import HistogramBlock, SeriesSet


class MemSource:
    def __init__(self) -> None:
        self._labels: dict[int, Labels] = {}
        self._t: dict[int, list[np.ndarray]] = {}
        self._v: dict[int, list[np.ndarray]] = {}
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._hists: dict[int, dict[int, bytes]] = {}  # sid -> {t: the histogram's protobuf bytes}

    def add(self, labels: Labels | dict[str, str], t_ms, v) -> int:
        """Add samples of one series; a later sample at the same t replaces the earlier one."""
        sid = self._sid(labels)
        self._t.setdefault(sid, []).append(np.asarray(t_ms, np.int64))
        self._v.setdefault(sid, []).append(np.asarray(v, np.float64))
        self._sorted.pop(sid, None)
        return sid

    def add_histograms(self, labels: Labels | dict[str, str], t_ms, blobs: list[bytes]) -> int:
        """Add native histogram samples (remote-write ``Histogram`` bytes) of one series."""
        sid = self._sid(labels)
        self._hists.setdefault(sid, {}).update(zip(np.asarray(t_ms, np.int64).tolist(), blobs))
        return sid

    def _sid(self, labels: Labels | dict[str, str]) -> int:
        lbls = canonical(labels.items() if isinstance(labels, dict) else labels)
        sid = series_id(lbls)
        self._labels[sid] = lbls
        return sid

    def clear(self) -> None:
        self.__init__()

    def items(self) -> list[tuple[Labels, np.ndarray, np.ndarray]]:
        """Every series as (labels, t_ms, values): sorted by t, one sample per t, in label order."""
        return [(lbls, *self._series(sid)) for sid, lbls in sorted(self._labels.items(), key=lambda kv: kv[1])]

    def _series(self, sid: int) -> tuple[np.ndarray, np.ndarray]:
        got = self._sorted.get(sid)
        if got is None and sid not in self._t:  # a series of histograms only
            return np.empty(0, np.int64), np.empty(0, np.float64)
        if got is None:
            t = np.concatenate(self._t[sid])
            v = np.concatenate(self._v[sid])
            # Last write wins: reverse, stable-unique on t, keep the first (= latest) seen.
            rt, rv = t[::-1], v[::-1]
            ut, first = npsort.unique_first(rt)
            got = (ut, rv[first])
            self._sorted[sid] = got
        return got

    # ---- the read interface ----------------------------------------------------------

    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None) -> SeriesSet:
        if ctx is not None:
            ctx.check("select series")
        lo = np.iinfo(np.int64).min if start_ms is None else start_ms
        hi = np.iinfo(np.int64).max if end_ms is None else end_ms
        hits = []
        for sid, lbls in self._labels.items():
            if not labels_match(lbls, matchers):
                continue
            t, _ = self._series(sid)
            hist_t = self._hists.get(sid, {})
            if (len(t) and t[0] <= hi and t[-1] >= lo) or any(lo <= ht <= hi for ht in hist_t):
                hits.append((lbls, sid))
        hits.sort()
        if limit:
            hits = hits[:limit]
        if ctx is not None:
            ctx.charge_series(len(hits), "series selection")  # as the storage does
        return SeriesSet(np.array([s for _, s in hits], np.int64), [lbls for lbls, _ in hits], label_sorted=True)

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        n = 0
        for sid in series.ids.tolist():
            t, _ = self._series(sid)
            n += int(np.searchsorted(t, end_ms, "right") - np.searchsorted(t, start_ms, "left"))
        return n

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        ctx.check("read samples")
        sids, ts, vs = [], [], []
        for sid in sorted(ids.tolist()):
            t, v = self._series(sid)
            a, b = np.searchsorted(t, start_ms, "left"), np.searchsorted(t, end_ms, "right")
            sids.append(np.full(b - a, sid, np.int64))
            ts.append(t[a:b])
            vs.append(v[a:b])
        if not sids:
            return SampleBlock.empty()
        block = SampleBlock(np.concatenate(sids), np.concatenate(ts), np.concatenate(vs))
        ctx.charge_loaded(len(block), "sample loading")  # as the storage does, while loading
        return block

    def histogram_metrics(self) -> frozenset[str]:
        return frozenset(dict(self._labels[sid]).get(METRIC_NAME, "") for sid in self._hists)

    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> HistogramBlock:
        ctx.check("read histograms")
        rows = [(sid, t, b) for sid in sorted(set(ids.tolist())) for t, b in sorted(self._hists.get(sid, {}).items())
                if start_ms <= t <= end_ms]
        ctx.charge_loaded(len(rows), "histogram loading")
        return HistogramBlock(np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                              pa.array([r[2] for r in rows], pa.binary()))
