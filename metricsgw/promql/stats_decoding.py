"""The counter reset hints Prometheus 3 makes up where it reads histograms for their count and sum only.

Under ``histogram_count``, ``histogram_sum`` or ``histogram_avg``, with no subquery, ``histogram_quantile(s)``,
``histogram_fraction`` or trim operator above it (detectHistogramStatsDecoding, promql/engine.go of 3.14), a
selector reads its histograms through HistogramStatsIterator (promql/histogram_stats_iterator.go). That
iterator detects counter resets as it goes: a histogram whose stored hint is unknown gets "reset" or "not
reset" by comparing it with the histogram the iterator returned before it, when it returned one since it last
sought. The hints show in the answer only through the warning of conflicting counter resets that sum, avg,
sum_over_time and avg_over_time give (reset_hints.py): ``histogram_count(sum(h))`` can warn where ``sum(h)``
does not.

When the iterator seeks, and so forgets the histogram before, follows from how the selectors step through a
series (storage.MemoizedSeriesIterator for an instant selector, BufferedSeriesIterator for a range): at each
step, with T the step's time (after offset and @) and t0 = T - lookback (or - range), the iterator seeks to
the first sample at or after t0 when t0 is after the sample it stands on (the first at or after the previous
step's T; none: it stays), then returns every sample up to the first at or after T. So a sample's
predecessor was returned, and it is compared with it, when the predecessor is at or after the t0 of the
step that last sought. (Float samples of a series that also has histograms move the iterator too: they are
not counted here, a series switching kinds under such a query may get other hints.)
"""

from __future__ import annotations

import numpy as np
import promql_parser as pp

from ..model import is_stale
from . import native, native_math, parser, reset_hints, selectors

STATS = {"histogram_count", "histogram_sum", "histogram_avg"}
NEEDS_BUCKETS = {"histogram_quantile", "histogram_quantiles", "histogram_fraction"}


def stats_selectors(node, trims: dict) -> frozenset[int]:
    """The ``id`` of each VectorSelector (a range selector's too) Prometheus reads through the iterator: one
    with a STATS function above it, and no subquery, NEEDS_BUCKETS function or trim operator (``trims``)."""
    out = set()
    stack = [(node, False, False)]  # (node, a STATS function above, something needing buckets above)
    while stack:
        n, stats, buckets = stack.pop()
        if isinstance(n, pp.MatrixSelector):
            n = n.vector_selector
        if isinstance(n, pp.VectorSelector):
            if stats and not buckets:
                out.add(id(n))
            continue
        if isinstance(n, pp.SubqueryExpr) or (isinstance(n, pp.BinaryExpr) and id(n) in trims):
            buckets = True
        elif isinstance(n, pp.Call):
            buckets |= n.func.name in NEEDS_BUCKETS
            stats |= n.func.name in STATS
        stack.extend((c, stats, buckets) for c in parser.children(n))
    return frozenset(out)


def instant_hints(loaded: selectors.Loaded, hists: native.Decoded, ref: np.ndarray, lookback_ms: int,
                  left_open: bool) -> native.Decoded:
    """``hists`` with the hints the iterator gives the samples an instant selector answers at ``ref``
    (``loaded``: the selector's samples, stale markers included, values indexing ``hists``)."""
    if not len(loaded.t):
        return hists
    run_t0 = _runs(loaded, ref, lookback_ms)
    starts, ends = loaded.offsets[:-1, None], loaded.offsets[1:, None]
    last = selectors.search(loaded.offsets, loaded.t, ref, "right") - 1  # the newest sample at or before T
    good = ~is_stale(loaded.v)
    pred = _previous(good, loaded.offsets)
    li = np.clip(last, 0, len(loaded.t) - 1)
    oldest = ref[None, :] - lookback_ms + (1 if left_open else 0)
    used = (last >= starts) & (last < ends) & good[li] & (loaded.t[li] >= oldest)
    p = pred[li]
    compared = used & (p >= 0) & (loaded.t[np.maximum(p, 0)] >= run_t0)
    samples, before = li[compared], p[compared]
    return _hinted(hists, loaded.v[samples], loaded.v[before])


def range_hints(loaded: selectors.Loaded, hists: native.Decoded, ref: np.ndarray, range_ms: int,
                left_open: bool) -> native.Decoded:
    """``hists`` with the hints the iterator gives the samples of a range selector's windows ending at ``ref``."""
    if not len(loaded.t):
        return hists
    run_t0 = _runs(loaded, ref, range_ms)
    ld = loaded.without_stale()  # windows hold no stale markers: a sample's predecessor is the one before it
    lo, hi = selectors.search_many(ld.offsets, ld.t, [(ref - range_ms, "right" if left_open else "left"),
                                                      (ref, "right")])
    starts = ld.offsets[:-1, None]
    windows = hi > lo
    # Every sample of a window but its first follows one returned in the same run: compared.
    inner = np.zeros(len(ld.t) + 1, np.int64)
    np.add.at(inner, (lo + 1)[windows & (hi > lo + 1)], 1)
    np.add.at(inner, hi[windows & (hi > lo + 1)], -1)
    compared = np.cumsum(inner[:-1]) > 0
    # The first is compared when its predecessor was returned since the last seek.
    first = windows & (lo > starts)
    first &= ld.t[np.maximum(lo - 1, 0)] >= run_t0
    compared[lo[first]] = True
    samples = np.flatnonzero(compared)
    return _hinted(hists, ld.v[samples], ld.v[samples - 1])


def _runs(loaded: selectors.Loaded, ref: np.ndarray, reach_ms: int) -> np.ndarray:
    """Per series and step: the t0 of the step at which the iterator last sought (every sample at or after it,
    up to the step's, was returned since). It seeks at the first step, and where t0 is after the sample the
    step before left it on."""
    t0 = ref - reach_ms
    ends = loaded.offsets[1:, None]
    at = selectors.search(loaded.offsets, loaded.t, ref, "left")  # where each step leaves the iterator
    stands = at < ends
    on = loaded.t[np.minimum(at, len(loaded.t) - 1)]
    seek = np.ones(at.shape, bool)
    seek[:, 1:] = stands[:, :-1] & (t0[None, 1:] > on[:, :-1])
    last_seek = np.maximum.accumulate(np.where(seek, np.arange(len(ref))[None, :], 0), axis=1)
    return t0[last_seek]


def _previous(good: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each sample's previous non-stale sample in its series (global index), or -1."""
    idx = np.where(good, np.arange(len(good)), -1)
    prev = np.full(len(good), -1, np.int64)
    prev[1:] = np.maximum.accumulate(idx)[:-1]
    series_start = np.repeat(offsets[:-1], np.diff(offsets))
    return np.where(prev >= series_start, prev, -1)


def _hinted(hists: native.Decoded, samples: np.ndarray, before: np.ndarray) -> native.Decoded:
    """``hists`` with each of ``samples`` whose stored hint is unknown hinted by comparison with ``before``."""
    pairs = dict(zip(samples.astype(np.int64).tolist(), before.astype(np.int64).tolist()))
    stored = hists.reset_hints(list(pairs))
    hints = {}
    for (j, b), hint in zip(pairs.items(), stored.tolist()):
        if hint == reset_hints.UNKNOWN:
            reset = native_math.detect_reset(native_math.Hist.of(hists[j]), native_math.Hist.of(hists[b]))
            hints[j] = reset_hints.RESET if reset else reset_hints.NOT_RESET
    return hists.with_hints(hints) if hints else hists
