"""``limitk`` and ``limit_ratio`` (Prometheus 3; experimental there): which input series each keeps, whole
(labels, name included, and value, float or histogram), at every step at once (promql/engine.go of 3.14,
rangeEvalAgg and aggregationK).

- ``limitk(k, v)``: per group, the first k series of the input that have a sample at the step, in the
  input's order (Prometheus' is its input's: label order for a selector).
- ``limit_ratio(r, v)``: a series is kept where the offset its labels' hash gives it (label_hash.py) is
  below r (r >= 0), or at or above 1 + r (r < 0): whether it is depends on its labels and r only, and
  ``limit_ratio(r)`` and ``limit_ratio(-(1 - r))`` are complements (up to the rounding of 1 + r). r is capped to
  [-1, 1]; grouping does not change the answer.

An instant query lists each group's kept series in the order of Prometheus' heap (``instant_order``).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from ..errors import ExecError
from ..model import Labels
from . import annotations
from .aggregations import group_ids
from .label_hash import sample_offsets
from .native_values import HistSeries
from .value import Series

OPS = ("limitk", "limit_ratio")

# engine.go's maxInt64 / minInt64 (as float64: the largest below 2**63, and -2**63)
_MAX_INT64_F = 9223372036854774784.0
_MIN_INT64_F = -9223372036854775808.0


def apply(op: str, param: np.ndarray, floats: Series, hist: HistSeries | None, without: bool, names: list[str],
          annotate) -> tuple[Series, HistSeries | None]:
    """``op`` over an input whose float samples are ``floats`` and whose histogram samples are ``hist``: the
    float part and the histogram part of its answer. Both kinds are ranked together, a series' sample at a
    step being one or the other; with histograms in the input its series are taken in label order."""
    steps = floats.mask.shape[1]
    if not anything_kept(op, param, annotate):
        return Series.empty(steps), None
    if hist is None:
        labels, present = floats.labels, floats.mask
        f_rows = np.arange(len(labels))
    else:
        labels = sorted(set(floats.labels) | set(hist.series.labels))
        row = {lb: i for i, lb in enumerate(labels)}
        f_rows = np.fromiter((row[lb] for lb in floats.labels), np.int64, len(floats.labels))
        h_rows = np.fromiter((row[lb] for lb in hist.series.labels), np.int64, len(hist.series.labels))
        present = np.zeros((len(labels), steps), bool)
        present[f_rows] |= floats.mask
        present[h_rows] |= hist.series.mask
    keep = kept(op, labels, present, param, without, names)
    f_keep = keep[f_rows] & floats.mask
    rows = np.flatnonzero(f_keep.any(axis=1))
    if steps == 1 and len(rows):
        # (a histogram takes its place in its group's heap as a 0; the render lists histograms by labels)
        value = np.zeros(len(labels))
        value[f_rows] = np.where(floats.mask[:, 0], floats.values[:, 0], 0.0)
        position = np.zeros(len(labels), np.int64)
        order = instant_order(labels, keep[:, 0], value, without, names)
        position[order] = np.arange(len(order))
        rows = rows[np.argsort(position[f_rows[rows]], kind="stable")]
    out = Series(floats.labels, np.where(f_keep, floats.values, 0.0), f_keep).take(rows)
    if hist is None:
        return out, None
    h_keep = keep[h_rows] & hist.series.mask
    hs = Series(hist.series.labels, np.where(h_keep, hist.series.values, 0.0), h_keep).compact()
    return out, (HistSeries(hs, hist.hists) if len(hs) else None)


def anything_kept(op: str, param: np.ndarray, annotate) -> bool:
    """rangeEvalAgg's checks of the parameter over all steps: its errors and warnings, and False when no step
    can keep a series (every k below 1, every ratio 0). A NaN at any step fails the query (Go's math.Max and
    Min of a NaN are NaN, which passes the early returns)."""
    nan = bool(np.isnan(param).any())
    if op == "limitk":
        if nan:
            raise ExecError("Parameter value is NaN")
        lo, hi = float(param.min()), float(param.max())
        if hi < 1:
            return False
        if lo <= _MIN_INT64_F:
            raise ExecError(f"Scalar value {_go_float(lo)} underflows int64")
        if hi >= _MAX_INT64_F:
            raise ExecError(f"Scalar value {_go_float(hi)} overflows int64")
        return True
    if nan:
        raise ExecError("Ratio value is NaN")
    lo, hi = float(param.min()), float(param.max())
    if hi == 0 and lo == 0:
        return False
    if hi > 1:
        annotate(annotations.invalid_ratio(hi, 1.0))
    if lo < -1:
        annotate(annotations.invalid_ratio(lo, -1.0))
    return True


def kept(op: str, labels: list[Labels], present: np.ndarray, param: np.ndarray, without: bool,
         names: list[str]) -> np.ndarray:
    """The (series x step) cells ``op`` keeps of the input's present ones; ``param`` per step, checked."""
    if op == "limitk":
        gid = group_ids(labels, without, names)
        # int64(k) truncates; min(k, len(input)) changes nothing, a rank is below the input's length
        return present & (_rank_in_group(gid, present) < np.trunc(param)[None, :])
    r = np.clip(param, -1.0, 1.0)[None, :]
    offset = sample_offsets(labels)[:, None]
    return present & (((r >= 0) & (offset < r)) | ((r < 0) & (offset >= 1.0 + r)))


def _rank_in_group(gid: np.ndarray, present: np.ndarray) -> np.ndarray:
    """How many rows of the same group above each row have a sample at the step."""
    if not len(gid):
        return np.zeros(present.shape, np.int64)
    order = np.argsort(gid, kind="stable")  # each group's rows together, in input order
    p = present[order].astype(np.int64)
    before = np.cumsum(p, axis=0) - p  # present rows above, over all groups
    sorted_gid = gid[order]
    first = np.flatnonzero(np.r_[True, sorted_gid[1:] != sorted_gid[:-1]])  # each group's first row
    group_start = np.repeat(first, np.diff(np.r_[first, len(order)]))
    ranks = np.empty_like(before)
    ranks[order] = before - before[group_start]
    return ranks


def instant_order(labels: list[Labels], keep: np.ndarray, values: np.ndarray, without: bool,
                  names: list[str]) -> list[int]:
    """The kept rows (one step) in the order Prometheus answers an instant query: groups in the order they
    first appear in the input, each group's series in the order its heap holds them (heap.Push of each kept
    sample in input order, smallest value on top, NaN before everything; a histogram counts as 0)."""
    gid = group_ids(labels, without, names)
    heaps: dict[int, list] = {}
    for i in np.flatnonzero(keep).tolist():
        heapq.heappush(heaps.setdefault(int(gid[i]), []), _Entry(float(values[i]), i))
    return [e.row for g in sorted(heaps) for e in heaps[g]]


class _Entry:
    """A heap entry ordered as vectorByValueHeap.Less (functions.go): a NaN is less than anything, a NaN too;
    else by value. heapq, like container/heap's up(), moves a pushed entry up while it is less than its parent."""

    __slots__ = ("value", "row")

    def __init__(self, value: float, row: int) -> None:
        self.value, self.row = value, row

    def __lt__(self, other: "_Entry") -> bool:
        return math.isnan(self.value) or self.value < other.value


def _go_float(x: float) -> str:
    """Go's %v of a float64 outside int64: ±Inf or e-notation, as Python's repr writes it."""
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(x)
