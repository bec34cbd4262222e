"""histogram_quantile over classic (le-bucketed) histograms, as Prometheus 2.42's
bucketQuantile: sort by le, coalesce equal bounds, force monotonic counts, interpolate; and Prometheus 3's
histogram_fraction over them (BucketFraction)."""

from __future__ import annotations

import math

import numpy as np

from .. import npsort
from ..model import Labels
from . import annotations
from .binary import dedupe
from .value import ScalarSteps, Series, drop_name


def _parse_le(v: str) -> float | None:
    try:
        return float(v)  # Go's ParseFloat accepts "+Inf", "Inf", "1e3", ...
    except ValueError:
        return None


def _groups(s: Series, annotate) -> dict[Labels, list[tuple[float, int]]]:
    """The series' rows by their labels without ``le`` (each row with its bound); a row without a bound is
    left out, with Prometheus 3's warning."""
    groups: dict[Labels, list[tuple[float, int]]] = {}
    for i, l in enumerate(s.labels):
        le = None
        rest = []
        for n, v in l:
            if n == "le":
                le = _parse_le(v)
            else:
                rest.append((n, v))
        if le is None:
            d = dict(l)
            annotate(annotations.bad_bucket_label(d.get("__name__", ""), d.get("le", "")))
            continue
        # Grouped with the metric name, as Prometheus does: buckets of two metrics never mix,
        # and two groups that differ only by name collide below as a duplicate label set.
        groups.setdefault(tuple(rest), []).append((le, i))
    return groups


def _per_group(s: Series, columns, annotate) -> Series:
    """``columns(les, counts, ks, group)`` for each group at the steps ``ks`` (its buckets sorted by le); a
    step where some of a group's buckets are missing is computed from those present."""
    steps = s.values.shape[1]
    labels, vals, masks = [], [], []
    for g, members in _groups(s, annotate).items():
        members.sort(key=lambda p: p[0])
        les = np.array([p[0] for p in members])
        rows = np.array([p[1] for p in members])
        counts, mask = s.values[rows], s.mask[rows]
        out = np.full(steps, np.nan)
        present = mask.any(axis=0)
        full = mask.all(axis=0)
        ks = np.flatnonzero(full)
        if len(ks):
            out[ks] = columns(les, counts[:, ks], ks, g)
        for k in np.flatnonzero(present & ~full).tolist():  # some buckets missing at this step
            m = mask[:, k]
            out[k] = columns(les[m], counts[m, k : k + 1], np.array([k]), g)[0]
        labels.append(drop_name(g))
        vals.append(out)
        masks.append(present)
    if not labels:
        return Series.empty(steps)
    return dedupe(Series(labels, np.where(np.array(masks), np.array(vals), 0.0), np.array(masks)).compact())


def histogram_quantile(q: ScalarSteps, s: Series, annotate) -> Series:
    """``annotate``: where a warning goes (QueryContext.annotate); Prometheus 3 also tells of buckets that
    had to be made monotonic (a decrease beyond floating-point noise)."""
    def columns(les, counts, ks, group):
        prev, cur = counts[:-1], counts[1:]
        asked = (q.values[ks] >= 0) & (q.values[ks] <= 1)  # a quantile outside [0, 1] is answered before
        if ((cur < prev) & ~np.isclose(cur, prev, rtol=1e-12, atol=0))[:, asked].any():
            annotate(annotations.forced_monotonicity(dict(group).get("__name__", "")))
        return _quantile_columns(q.values[ks], les, counts)

    return _per_group(s, columns, annotate)


def histogram_fraction(lower: np.ndarray, upper: np.ndarray, s: Series, annotate) -> Series:
    """Prometheus 3's histogram_fraction of classic histograms (2.42 has none)."""
    return _per_group(s, lambda les, counts, ks, _: _fraction_columns(lower[ks], upper[ks], les, counts), annotate)


def _fraction_columns(lower: np.ndarray, upper: np.ndarray, les: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """BucketFraction for every column at once: the ranks at ``upper`` and ``lower``, each interpolated
    linearly within its bucket (none within a bucket reaching down to -Inf), over the bucket total."""
    if len(les) == 0 or not math.isinf(les[-1]) or les[-1] < 0:
        return np.full(counts.shape[1], np.nan)
    uniq, start = npsort.unique_first(les)
    c = np.add.reduceat(counts, start, axis=0)  # cumulative counts, equal bounds coalesced
    total = c[-1]
    below = np.vstack([np.zeros((1, c.shape[1])), c[:-1]])  # the cumulative count below each bucket
    # A first bucket above 0 starts at 0 (observations are assumed positive), else at -Inf.
    lows = np.concatenate([[0.0 if uniq[0] > 0 else -np.inf], uniq[:-1]])
    cols = np.arange(c.shape[1])

    def rank(v: np.ndarray) -> np.ndarray:
        b = np.minimum(np.searchsorted(uniq, v, side="right"), len(uniq) - 1)  # the first bucket above v
        lo, hi = lows[b], uniq[b]
        with np.errstate(invalid="ignore", divide="ignore"):
            inside = below[b, cols] + (c[b, cols] - below[b, cols]) * (v - lo) / (hi - lo)
        r = np.where(lo >= v, below[b, cols], np.where(np.isneginf(lo), c[b, cols], inside))
        return np.where(np.isposinf(v), total, np.minimum(r, total))

    with np.errstate(invalid="ignore", divide="ignore"):
        out = (rank(upper) - rank(lower)) / total
    out = np.where(lower >= upper, 0.0, out)
    return np.where((total == 0) | np.isnan(lower) | np.isnan(upper), np.nan, out)


def _quantile_columns(q: np.ndarray, les: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """bucketQuantile for every column (step) at once; les sorted ascending."""
    ncol = counts.shape[1]
    out = np.full(ncol, np.nan)
    if len(les) == 0 or not math.isinf(les[-1]) or les[-1] < 0:
        return _q_edges(q, out)
    # Coalesce buckets with the same upper bound (sum their counts).
    uniq, start = npsort.unique_first(les)
    c = np.add.reduceat(counts, start, axis=0)
    c = _monotonic(c)
    if len(uniq) < 2:
        return _q_edges(q, out)
    total = c[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        rank = q * total
        ge = c[:-1] >= rank[None, :]
        b = np.where(ge.any(axis=0), np.argmax(ge, axis=0), len(uniq) - 1)
        cols = np.arange(ncol)
        end = uniq[b]
        prev_b = np.maximum(b - 1, 0)
        start_b = np.where(b > 0, uniq[prev_b], 0.0)
        cnt = c[b, cols] - np.where(b > 0, c[prev_b, cols], 0.0)
        rk = rank - np.where(b > 0, c[prev_b, cols], 0.0)
        res = start_b + (end - start_b) * (rk / cnt)
        res = np.where(b == len(uniq) - 1, uniq[-2], res)
        res = np.where((b == 0) & (uniq[0] <= 0), uniq[0], res)
    return _q_edges(q, np.where(total == 0, np.nan, res))


def _q_edges(q: np.ndarray, res: np.ndarray) -> np.ndarray:
    res = np.where(np.isnan(q), np.nan, res)
    res = np.where(q < 0, -np.inf, res)
    return np.where(q > 1, np.inf, res)


def _monotonic(c: np.ndarray) -> np.ndarray:
    """Go's ensureMonotonic: a NaN count never raises the running max."""
    out = c.copy()
    run = np.full(c.shape[1], -np.inf)
    for i in range(len(c)):
        cur = c[i]
        raise_ = cur > run
        lower = cur < run
        run = np.where(raise_, cur, run)
        out[i] = np.where(lower, run, cur)
    return out
