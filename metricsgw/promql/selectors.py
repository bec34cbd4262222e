"""Selecting samples: instant selectors with lookback and staleness, and range windows.

All steps at once: samples of every series are laid out in one array sorted by (series, t);
one combined key (series * span + t) lets a single ``np.searchsorted`` find, for every
(series, step), the last sample <= T and the first sample >= T - range.
"""

from __future__ import annotations

import numpy as np

from ..limits.context import QueryContext
from ..model import Labels, Matcher, is_stale
from ..storage.seam import SampleReader
from . import window_kernels
from .value import Ranges, Series, pick


class Loaded:
    """Samples of the selected series, grouped by series in label order."""

    def __init__(self, labels: list[Labels], t: np.ndarray, v: np.ndarray, offsets: np.ndarray,
                 hint: np.ndarray | None = None, hint_sorted: bool = False):
        self.labels, self.t, self.v, self.offsets = labels, t, v, offsets
        # Series in the order the source listed them: sorting from there is cheap when the
        # source lists them (mostly) in label order, as the storage does per metric; nothing to sort when it says
        # they are (``hint_sorted``: a selection of one metric, a batch of one).
        self.hint, self.hint_sorted = hint, hint_sorted

    def label_order(self) -> np.ndarray:
        """Series indexes in label order (the order results are returned in)."""
        if not len(self.labels):
            return np.empty(0, np.int64)
        hint = self.hint if self.hint is not None else np.arange(len(self.labels), dtype=np.int64)
        if self.hint_sorted:
            return hint
        pre = pick(self.labels, hint)
        # timsort: near-linear when ``pre`` is made of a few sorted runs
        return hint[np.array(sorted(range(len(pre)), key=pre.__getitem__), dtype=np.int64)]

    def without_stale(self) -> "Loaded":
        """Range windows skip stale markers, as Prometheus does."""
        stale = is_stale(self.v)
        if not stale.any():
            return self
        keep = ~stale
        counts = _segment_counts(keep, self.offsets)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return Loaded(self.labels, self.t[keep], self.v[keep], offsets, self.hint, self.hint_sorted)


def _segment_counts(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    csum = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])
    return csum[offsets[1:]] - csum[offsets[:-1]]


def load(source: SampleReader, matchers: list[Matcher], start_ms: int, end_ms: int, ctx: QueryContext) -> Loaded:
    """Select series and read their samples in [start_ms, end_ms].

    The source charges ``ctx`` for the series it selects and the samples as it loads them
    (docs/internals.md); here the estimate is checked first, so an oversized query is refused
    before any sample is read."""
    ctx.check("select series")
    ss = source.select_series(matchers, start_ms, end_ms, ctx)
    if len(ss) == 0:
        return Loaded([], np.empty(0, np.int64), np.empty(0), np.zeros(1, np.int64))
    ctx.check_estimate(int(source.estimate_samples(ss, start_ms, end_ms)), "series selection")
    block = source.read_samples(ss.ids, start_ms, end_ms, ctx)
    ctx.check("sample loading")
    if len(block) > 1 and not (block.sid[1:] >= block.sid[:-1]).all():  # the contract says sorted; be safe
        # (compared, not subtracted: sids are 64-bit hashes whose differences overflow)
        perm = np.lexsort((block.t, block.sid))
        block = type(block)(block.sid[perm], block.t[perm], block.v[perm])
    # Series stay in the block's sid order (no sample is moved); ``order`` lists them in
    # label order, which is the order results are returned in.
    if len(block) == 0:
        return Loaded([], np.empty(0, np.int64), np.empty(0), np.zeros(1, np.int64))
    # a comparison, not np.diff: flatnonzero of a bool array is ~8x faster than of int64 differences
    starts = np.concatenate([[0], np.flatnonzero(block.sid[1:] != block.sid[:-1]) + 1])
    offsets = np.concatenate([starts, [len(block)]]).astype(np.int64)
    # Each block series' position in the selection (sids are unique there).
    by_sid = np.argsort(ss.ids, kind="stable")
    pos = by_sid[np.searchsorted(ss.ids, block.sid[starts], sorter=by_sid)].astype(np.int64)
    return Loaded(pick(ss.labels, pos), block.t, block.v, offsets, np.argsort(pos, kind="stable"), ss.label_sorted)


def _keys(offsets: np.ndarray, t: np.ndarray, base: int, span: int) -> np.ndarray:
    n = len(offsets) - 1
    idx = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    return idx * span + (t - base)


def search(offsets: np.ndarray, t: np.ndarray, times: np.ndarray, side: str) -> np.ndarray:
    """For every series i and query time times[k]: the index into t (global) where times[k]
    would be inserted within series i's slice. Returns int64 [n_series, n_steps]."""
    return search_many(offsets, t, [(times, side)])[0]


def search_many(offsets: np.ndarray, t: np.ndarray, queries: list[tuple[np.ndarray, str]]) -> list[np.ndarray]:
    """``search`` for several (times, side) at once, building the combined key only once."""
    n = len(offsets) - 1
    if n == 0:
        return [np.empty((0, len(times)), np.int64) for times, _ in queries]
    if all(_uniform(times) for times, _ in queries):
        return [_search_grid(offsets, t, times, side) for times, side in queries]
    lo_t = min(int(times.min()) for times, _ in queries)
    hi_t = max(int(times.max()) for times, _ in queries)
    if len(t):
        lo_t, hi_t = min(lo_t, int(t.min())), max(hi_t, int(t.max()))
    base, span = lo_t, hi_t - lo_t + 1
    if n * span < (1 << 62):
        keys = _keys(offsets, t, base, span)
        row = np.arange(n, dtype=np.int64)[:, None] * span
        # needles in ascending order (row-major), which numpy's binary search exploits
        return [np.searchsorted(keys, row + (times[None, :] - base), side=side).astype(np.int64)
                for times, side in queries]
    outs = []
    for times, side in queries:
        out = np.empty((n, len(times)), np.int64)
        for i in range(n):  # enormous time spans: fall back to one search per series
            a, b = offsets[i], offsets[i + 1]
            out[i] = a + np.searchsorted(t[a:b], times, side=side)
        outs.append(out)
    return outs


def _uniform(times: np.ndarray) -> bool:
    """A range query's evaluation times (no @): a grid of equal positive steps."""
    if len(times) < 2:
        return len(times) == 1
    d = np.diff(times)
    return bool(d[0] > 0 and (d == d[0]).all())


def _search_grid(offsets: np.ndarray, t: np.ndarray, times: np.ndarray, side: str) -> np.ndarray:
    """``search`` for a uniform grid of times, by counting instead of binary search: each sample
    falls before a known grid point (one division), a bincount per (series, grid point) and
    a running sum give every insertion index. O(samples + series x steps)."""
    n, steps = len(offsets) - 1, len(times)
    step = int(times[1] - times[0]) if steps > 1 else 1
    compiled = window_kernels.grid_search(offsets, t, int(times[0]), step, steps, side)
    if compiled is not None:
        return compiled
    # "right": samples with t <= times[k]; "left": samples with t < times[k], i.e. t <= times[k] - 1 (ms).
    g0 = int(times[0]) - (1 if side == "left" else 0)
    # First grid point at or after t (a ceil; `steps` = after all of them). In float64: exact for
    # spans below 2**52 ms, and several times faster than int64 floor division.
    x = t.astype(np.float64)
    x -= g0
    x /= step
    np.ceil(x, out=x)
    np.clip(x, 0, steps, out=x)
    k = x.astype(np.int64)
    k += np.repeat(np.arange(0, n * (steps + 1), steps + 1, dtype=np.int64), np.diff(offsets))
    counts = np.bincount(k, minlength=n * (steps + 1)).reshape(n, steps + 1)
    return offsets[:-1, None] + np.cumsum(counts[:, :steps], axis=1)


def instant(loaded: Loaded, ref_ms: np.ndarray, lookback_ms: int, left_open: bool) -> Series:
    """The value of each series at each ref time: last sample in (T - lookback, T] (``left_open``, as
    Prometheus 3) or [T - lookback, T] (2.x), unless stale."""
    n, steps = len(loaded.labels), len(ref_ms)
    if n == 0:
        return Series.empty(steps)
    hi = search(loaded.offsets, loaded.t, ref_ms, "right")
    last = hi - 1
    starts = loaded.offsets[:-1, None]
    has = last >= starts
    li = np.where(has, last, 0)
    if len(loaded.t) == 0:
        return Series.empty(steps)
    st = loaded.t[li]
    sv = loaded.v[li]
    oldest = ref_ms[None, :] - lookback_ms + (1 if left_open else 0)
    mask = has & (st >= oldest) & ~is_stale(sv)
    values = np.where(mask, sv, 0.0)
    order = loaded.label_order()
    return Series(pick(loaded.labels, order), values[order], mask[order],
                  np.where(mask, st, 0)[order]).compact()


def ranges(loaded: Loaded, end_ms: np.ndarray, range_ms: int, left_open: bool) -> Ranges:
    """Windows (end - range, end] (``left_open``, as Prometheus 3) or [end - range, end] (2.x) for every step."""
    ld = loaded.without_stale()
    lo, hi = search_many(ld.offsets, ld.t, [(end_ms - range_ms, "right" if left_open else "left"), (end_ms, "right")])
    # Rows in label order; samples stay put (lo/hi are global indices).
    order = ld.label_order()
    return Ranges(pick(ld.labels, order), ld.t, ld.v, ld.offsets, lo[order], hi[order], end_ms, range_ms)


def series_as_samples(s: Series, grid_ms: np.ndarray) -> Loaded:
    """A subquery's inner result as raw samples (present points only)."""
    m = s.mask
    counts = m.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows, cols = np.nonzero(m)  # row-major: grouped by series, then time
    return Loaded(list(s.labels), grid_ms[cols].astype(np.int64), s.values[rows, cols], offsets)
