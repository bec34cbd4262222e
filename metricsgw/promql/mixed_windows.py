"""Range-function windows holding both float and histogram samples of one series, as Prometheus 3 answers them.

The float part of a range function (calls.py) and its histogram part (native_eval.py) are worked out apart, each
from its own samples; where a series' window holds both kinds, Prometheus 3 looks at them together:
- rate, increase, delta, sum_over_time, avg_over_time: nothing, with a warning;
- irate, idelta: the newest two samples decide: both floats, the float answer; both histograms, the histogram
  answer; one of each, nothing, with a warning;
- last_over_time / first_over_time: the newer (older) of the window's last (first) float and histogram;
- resets, changes: the samples of both kinds in time order, a change of kind counting as a reset (change).
``settle`` empties the windows a part does not answer, the same decision on either side, so the two parts
never both answer one window. Under 2.x (``--query.promql-compat=2``) a mixed window stays refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import annotations
from .native_values import HistRanges
from .value import Ranges

DROPPED = {"rate", "increase", "delta", "sum_over_time", "avg_over_time"}
NEWEST_TWO = {"irate", "idelta"}
ENDS = {"last_over_time": True, "first_over_time": False}
SETTLED = DROPPED | NEWEST_TWO | set(ENDS)


def cells(floats: Ranges, hist: HistRanges):
    """(float row, histogram row, step) of every window holding samples of both kinds of one series."""
    rows = {lb: i for i, lb in enumerate(floats.labels)}
    h = hist.ranges
    for j, lb in enumerate(h.labels):
        i = rows.get(lb)
        if i is None:
            continue
        both = (floats.hi[i] > floats.lo[i]) & (h.hi[j] > h.lo[j])
        for k in np.flatnonzero(both).tolist():
            yield i, j, k


def settle(name: str, floats: Ranges, hist: HistRanges, annotate=None) -> tuple[Ranges, HistRanges]:
    """``floats`` and ``hist`` with the windows each part of ``name`` leaves to the other (or to nobody)
    emptied; ``annotate`` (the float side's) hears the warnings."""
    h = hist.ranges
    f_hi, h_hi = None, None
    for i, j, k in cells(floats, hist):
        keep_float, keep_hist = _decide(name, floats, i, h, j, k)
        if not keep_float:
            f_hi = floats.hi.copy() if f_hi is None else f_hi
            f_hi[i, k] = floats.lo[i, k]
        if not keep_hist:
            h_hi = h.hi.copy() if h_hi is None else h_hi
            h_hi[j, k] = h.lo[j, k]
        if not (keep_float or keep_hist) and annotate is not None:
            annotate(annotations.mixed_floats_histograms(dict(floats.labels[i]).get("__name__", "")))
    if f_hi is not None:
        floats = dataclasses.replace(floats, hi=f_hi)
    if h_hi is not None:
        hist = HistRanges(dataclasses.replace(h, hi=h_hi), hist.hists)
    return floats, hist


def _decide(name: str, f: Ranges, i: int, h: Ranges, j: int, k: int) -> tuple[bool, bool]:
    """Whether the float part, the histogram part answers the window (i / j, step k)."""
    if name in DROPPED:
        return False, False
    if name in ENDS:
        if ENDS[name]:
            float_wins = f.t[f.hi[i, k] - 1] > h.t[h.hi[j, k] - 1]
        else:
            float_wins = f.t[f.lo[i, k]] < h.t[h.lo[j, k]]
        return bool(float_wins), not float_wins
    # irate / idelta: the kinds of the newest two samples of either kind
    newest = sorted([(int(t), True) for t in f.t[max(f.lo[i, k], f.hi[i, k] - 2):f.hi[i, k]]]
                    + [(int(t), False) for t in h.t[max(h.lo[j, k], h.hi[j, k] - 2):h.hi[j, k]]])[-2:]
    kinds = {is_float for _, is_float in newest}
    if kinds == {True}:
        return True, False
    if kinds == {False}:
        return False, True
    return False, False


def pair_counts(floats: Ranges, hist: HistRanges, resets: bool, hists_flagged) -> dict:
    """resets() / changes() of each mixed window: (float row, step) -> the count over its samples of both kinds in
    time order (Prometheus 3's funcResets / funcChanges); ``hists_flagged(earlier, later)`` tells whether a pair
    of histograms counts."""
    h = hist.ranges
    out = {}
    for i, j, k in cells(floats, hist):
        merged = sorted([(int(f_t), float(v), None) for f_t, v in zip(
            floats.t[floats.lo[i, k]:floats.hi[i, k]].tolist(), floats.v[floats.lo[i, k]:floats.hi[i, k]].tolist())]
            + [(int(h_t), 0.0, hist.hists[int(x)]) for h_t, x in zip(
                h.t[h.lo[j, k]:h.hi[j, k]].tolist(), h.v[h.lo[j, k]:h.hi[j, k]].tolist())], key=lambda s: s[0])
        n = 0
        for (_, pv, ph), (_, cv, ch) in zip(merged, merged[1:]):
            if (ph is None) != (ch is None):
                n += 1
            elif ph is None:
                n += (cv < pv) if resets else (cv != pv and not (cv != cv and pv != pv))
            else:
                n += bool(hists_flagged(ph, ch))
        out[(i, k)] = float(n)
    return out
