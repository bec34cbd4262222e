"""PromQL values, evaluated for every step of a query at once.

Inside the engine an instant vector is ``Series``: one row per label set, one column per
step, with a presence mask (a point may be missing at some steps). A range vector is
``Ranges``: raw samples per series plus the window each step looks at. The public results
(`Vector`, `Matrix`, `Scalar`, `String`) are what the API renders.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..model import METRIC_NAME, Labels


@dataclass
class Series:
    """An instant vector at every step: labels[i] has values[i, k] where mask[i, k]."""

    labels: list[Labels]
    values: np.ndarray  # float64 [n_series, n_steps]
    mask: np.ndarray  # bool [n_series, n_steps]
    # Timestamps (ms) of the selected samples, only for plain selectors (timestamp()).
    sample_t: np.ndarray | None = None

    @classmethod
    def empty(cls, n_steps: int) -> "Series":
        return cls([], np.empty((0, n_steps)), np.empty((0, n_steps), bool))

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, rows) -> "Series":
        """The series at these row indexes."""
        idx = np.asarray(rows, np.int64)
        st = None if self.sample_t is None else self.sample_t[idx]
        return Series(pick(self.labels, idx), self.values[idx], self.mask[idx], st)

    def compact(self) -> "Series":
        """Drop series that have no point at any step."""
        keep = self.mask.any(axis=1)
        if keep.all():
            return self
        return self.take(np.flatnonzero(keep))


@dataclass
class ScalarSteps:
    """A scalar at every step."""

    values: np.ndarray  # float64 [n_steps]


@dataclass
class StringValue:
    value: str


@dataclass
class Ranges:
    """A range vector: samples of each series (concatenated, sorted by series then time)
    and, for each (series, step), the half-open index window [lo, hi) into them."""

    labels: list[Labels]
    t: np.ndarray  # int64 ms, all series concatenated
    v: np.ndarray  # float64
    offsets: np.ndarray  # int64: start of each series' segment in t/v (+ the end); segments
    #                      need not be in row order: rows index samples only through lo/hi
    lo: np.ndarray  # int64 [n_series, n_steps]
    hi: np.ndarray  # int64 [n_series, n_steps]
    range_end: np.ndarray  # int64 ms [n_steps]: the window's right edge (after @/offset)
    range_ms: int
    # Points of a subquery's result, held (promql/held.py) until the function over it is done.
    held: int = 0

    def __len__(self) -> int:
        return len(self.labels)


# Sorts just before any (METRIC_NAME, value) pair, so a bisection finds where the name would be.
_NAME_KEY = (METRIC_NAME,)


def drop_name(labels: Labels) -> Labels:
    """``labels`` without ``__name__``. Label sets are sorted by name (model.Labels), so the name
    is found by bisection: range functions and arithmetic call this for every series."""
    i = bisect_left(labels, _NAME_KEY)
    if i < len(labels) and labels[i][0] == METRIC_NAME:
        return labels[:i] + labels[i + 1:]
    return labels


def drop_names(many: Sequence[Labels]) -> list[Labels]:
    """``drop_name`` of each label set. One metric's series hold the name at one index (the labels sorting
    before ``__name__``, upper-case ones such as DCGM's ``Hostname``, are the same for all of them): that index
    is found once and checked by a lookup per set, not bisected for each (a third less over a 375k-series
    dashboard selection)."""
    if not many:
        return []
    k = bisect_left(many[0], _NAME_KEY)
    if k == 0:
        return [lb[1:] if lb and lb[0][0] == METRIC_NAME else drop_name(lb) for lb in many]
    return [lb[:k] + lb[k + 1:] if len(lb) > k and lb[k][0] == METRIC_NAME else drop_name(lb) for lb in many]


def pick(items: Sequence, rows: np.ndarray) -> list:
    """``[items[i] for i in rows]``, by one C-level map (per-series label lists are reordered this way)."""
    return list(map(items.__getitem__, rows.tolist()))


# ---- Public results ---------------------------------------------------------------


@dataclass
class Scalar:
    t: float  # seconds
    v: float


@dataclass
class String:
    t: float
    s: str


@dataclass
class Vector:
    """An instant query's vector: one point per series, all at time ``t`` (seconds)."""

    t: float
    labels: list[Labels]
    values: np.ndarray  # float64 [n]
    # Native histogram samples, all at ``t`` too (promql/native.py FloatHistogram each).
    hist_labels: list[Labels] = field(default_factory=list)
    hists: list = field(default_factory=list)


@dataclass
class Matrix:
    """Series with their points: for series i, t_ms[offsets[i]:offsets[i+1]] and v likewise."""

    labels: list[Labels]
    t_ms: np.ndarray  # int64
    v: np.ndarray  # float64
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    # Native histogram points: (labels, t_ms int64 array, [FloatHistogram]) per series, by labels.
    hist_rows: list = field(default_factory=list)

    def points(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.t_ms[a:b], self.v[a:b]


Value = Scalar | String | Vector | Matrix
