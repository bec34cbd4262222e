"""A range query's result cut into stretches of steps and put back together, exactly as one evaluation lays it out.

``Engine.range`` answers a Matrix whose series are sorted by their labels, each with the points of the steps
where it has a value, and no series without one (engine.series_matrix). Steps are evaluated independently, so
the answer over [a, c] is the answer over [a, b] joined with the one over (b, c]: ``join`` of stretches gives
the same series in the same order with the same points as one evaluation over their union.
"""

from __future__ import annotations

import numpy as np

from .value import Matrix


def empty() -> Matrix:
    return Matrix([], np.empty(0, np.int64), np.empty(0), np.zeros(1, np.int64))


def series_of_points(m: Matrix) -> np.ndarray:
    """int64 per point: the index of its series."""
    return np.repeat(np.arange(len(m.labels), dtype=np.int64), np.diff(m.offsets))


def between(m: Matrix, lo_ms: int, hi_ms: int) -> Matrix:
    """The points at steps in [lo_ms, hi_ms]; series left without a point are dropped."""
    keep = (m.t_ms >= lo_ms) & (m.t_ms <= hi_ms)
    if keep.all():
        return m
    counts = np.bincount(series_of_points(m)[keep], minlength=len(m.labels))
    present = np.flatnonzero(counts)
    if not len(present):
        return empty()
    offsets = np.concatenate([[0], np.cumsum(counts[present])]).astype(np.int64)
    return Matrix([m.labels[i] for i in present], m.t_ms[keep], m.v[keep], offsets)


def join(parts: list[Matrix]) -> Matrix:
    """Stretches over disjoint steps as one Matrix: series in label order, each one's points by time."""
    parts = [p for p in parts if len(p.labels)]
    if not parts:
        return empty()
    if len(parts) == 1:
        return parts[0]
    labels = sorted({l for p in parts for l in p.labels})
    index = {l: i for i, l in enumerate(labels)}
    owner = np.concatenate([np.array([index[l] for l in p.labels], np.int64)[series_of_points(p)] for p in parts])
    t = np.concatenate([p.t_ms for p in parts])
    v = np.concatenate([p.v for p in parts])
    order = np.lexsort((t, owner))
    counts = np.bincount(owner, minlength=len(labels))
    return Matrix(labels, t[order], v[order], np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


def nbytes(m: Matrix) -> int:
    """About what the Matrix holds: its arrays, and its label sets as Python tuples of strings."""
    label_bytes = sum(64 + sum(120 + len(k) + len(v) for k, v in l) for l in m.labels)
    return m.t_ms.nbytes + m.v.nbytes + m.offsets.nbytes + label_bytes
