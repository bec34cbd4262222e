"""Aggregation operators over a (series x step) matrix: each series maps to a group id,
and groups are reduced with ufunc.at / masked sorts, for all steps at once."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Callable

import numpy as np

from .. import npsort
from ..errors import ExecError
from ..model import METRIC_NAME, Labels, is_label_name
from . import annotations
from .format import format_value
from .value import Series, drop_name, drop_names


def group_labels(labels: Labels, without: bool, names: list[str]) -> Labels:
    return grouper(without, names)(labels)


def grouper(without: bool, names: list[str]) -> Callable[[Labels], Labels]:
    """The function from a series' labels to its group's labels, for ``by``/``without (names)``.

    Called once per series of an aggregation: ``by`` looks each name up by bisection (label
    sets are sorted by name), instead of testing every pair of every series."""
    if without:
        if not names:
            return drop_name
        drop = set(names) | {METRIC_NAME}
        return lambda labels: tuple(p for p in labels if p[0] not in drop)
    keys = [(n,) for n in sorted(set(names))]  # sorts just before any (n, value) pair

    def by(labels: Labels) -> Labels:
        out = []
        for key in keys:
            i = bisect_left(labels, key)
            if i < len(labels) and labels[i][0] == key[0]:
                out.append(labels[i])
        return tuple(out)

    return by


def group_ids(labels: list[Labels], without: bool, names: list[str],
              keys: dict[Labels, int] | None = None) -> np.ndarray:
    """Each series' group number, numbering new groups in order of appearance in ``keys``."""
    keys = {} if keys is None else keys
    setdefault = keys.setdefault
    return np.fromiter((setdefault(key, len(keys)) for key in group_keys(labels, without, names)), np.int64,
                       len(labels))


def group_keys(labels: Sequence[Labels], without: bool, names: list[str]) -> Iterable[Labels]:
    """``grouper(without, names)`` of each label set. For ``by`` one or two names, the names' usual places in a
    set of each size are taken from a few dozen sets and checked in each by one lookup (one metric's series of one
    size mostly hold their labels at the same places; a set where they are not is bisected as before): grouping
    400k series by (namespace, pod), 0.55 s -> 0.30. ``without ()`` (a binary operator's default matching) is
    ``drop_names``."""
    if without and not names:
        return drop_names(labels)
    of = grouper(without, names)
    wanted = sorted(set(names))
    if without or not labels or not 1 <= len(wanted) <= 2:
        return map(of, labels)
    at = _usual_places(labels, wanted)
    if not at:
        return map(of, labels)
    if len(wanted) == 1:
        (a,) = wanted
        return ((lb[p[0]],) if (p := at.get(len(lb))) and lb[p[0]][0] == a else of(lb) for lb in labels)
    a, b = wanted  # p[0] < p[1]: label sets are sorted by name
    return ((lb[p[0]], lb[p[1]]) if (p := at.get(len(lb))) and lb[p[0]][0] == a and lb[p[1]][0] == b else of(lb)
            for lb in labels)


def _usual_places(labels: Sequence[Labels], wanted: list[str], probes: int = 64) -> dict[int, tuple[int, ...]]:
    """For each size of set among ``probes`` sets spread over ``labels``: the places ``wanted`` names hold in most
    of those of that size that hold them all."""
    seen: dict[int, dict[tuple[int, ...], int]] = {}
    for k in np.linspace(0, len(labels) - 1, min(probes, len(labels))).astype(np.int64).tolist():
        place = {n: i for i, (n, _) in enumerate(labels[k])}
        if all(n in place for n in wanted):
            counts = seen.setdefault(len(labels[k]), {})
            key = tuple(place[n] for n in wanted)
            counts[key] = counts.get(key, 0) + 1
    return {size: max(counts, key=counts.__getitem__) for size, counts in seen.items()}


def _groups(s: Series, without: bool, names: list[str]) -> tuple[list[Labels], np.ndarray]:
    keys: dict[Labels, int] = {}
    gid = group_ids(s.labels, without, names, keys)
    return list(keys), gid


def group_sum(gid: np.ndarray, g: int, values: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
    """Each group's rows of ``values`` added at every step, one row after the other in row order,
    starting from ``into`` (or 0.0): the bits ``np.add.at(into, gid, values)`` gives (NaNs aside,
    whose sign bit may differ, which nothing shows), by one weighted bincount over flat
    (group, step) cells instead of ufunc.at's slow indexed loop."""
    steps = values.shape[1]
    cells = (gid[:, None] * steps + np.arange(steps)).ravel()
    weights = values.ravel().astype(np.float64, copy=False)
    if into is not None:
        # the accumulator first: 0.0 + acc is acc (an accumulator that started at 0.0 is never -0.0)
        cells = np.concatenate([np.arange(g * steps), cells])
        weights = np.concatenate([into.ravel(), weights])
    return np.bincount(cells, weights=weights, minlength=g * steps).reshape(g, steps)


def check_parameter(op: str, values: np.ndarray, annotate) -> None:
    """Prometheus 3 fails topk/bottomk with a NaN k, and warns of a quantile outside [0, 1]."""
    if op in ("topk", "bottomk") and np.isnan(values).any():
        raise ExecError("Parameter value is NaN")
    if op == "quantile":
        for bad in values[np.isnan(values) | (values < 0) | (values > 1)][:1].tolist():
            annotate(annotations.invalid_quantile(bad))


def aggregate(op: str, s: Series, without: bool, names: list[str], param, prometheus_3: bool) -> Series:
    """``prometheus_3``: sum and avg as Prometheus 3's Kahan-compensated additions (``compensated``), and
    stddev/stdvar NaN for a group holding a NaN or an infinity (2.42 gives a single such sample 0)."""
    steps = s.values.shape[1]
    if op in ("topk", "bottomk"):
        return _topk(s, without, names, param, op == "bottomk")
    if op == "count_values":
        return count_values(s, without, names, param)
    glabels, gid = _groups(s, without, names)
    g = len(glabels)
    m, v = s.mask, s.values
    count = group_sum(gid, g, m)
    present = count > 0
    if op == "sum":
        out = group_sum(gid, g, np.where(m, v, 0.0))
        if prometheus_3:
            out = compensated(gid, g, v, m, out)
    elif op == "count":
        out = count
    elif op == "group":
        out = np.ones((g, steps))
    elif op in ("min", "max"):
        # fmin/fmax skip NaN: NaN only when every input is NaN, as Prometheus.
        out = np.full((g, steps), np.nan)
        (np.fmin if op == "min" else np.fmax).at(out, gid, np.where(m, v, np.nan))
    elif op == "avg":
        out = _avg(gid, g, v, m, count, prometheus_3)
    elif op in ("stddev", "stdvar"):
        out = _welford_var(gid, g, v, m)
        if op == "stddev":
            out = np.sqrt(out)
        if prometheus_3:
            out = np.where(group_sum(gid, g, m & ~np.isfinite(v)) > 0, np.nan, out)
    elif op == "quantile":
        out = _quantile(gid, g, v, m, param)
    else:
        raise ExecError(f"unknown aggregation {op}")
    return Series(glabels, np.where(present, out, 0.0), present).compact()


def lost_cells(total: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """The (group, step) cells whose plain sum ``total`` the values' cancelling out made inexact: their
    magnitudes (``magnitude``, the group sums of |value|) add up to far more than the sum."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isfinite(magnitude) & (magnitude > np.abs(total) * 1e3)


def compensated(gid: np.ndarray, g: int, v: np.ndarray, m: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Group sums as Prometheus 3's Kahan-compensated additions give them. Plain adding (``total``) is off only
    where the values cancel out (``lost_cells``): those few cells are added again exactly (math.fsum, which
    the compensation approaches, and which does not depend on the order: batches of series give the same
    bits); the rest stay vectorised."""
    out = total.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = group_sum(gid, g, np.where(m, np.abs(v), 0.0))
    for gg, k in zip(*np.nonzero(lost_cells(total, magnitude))):
        rows = np.flatnonzero((gid == gg) & m[:, k])
        out[gg, k] = math.fsum(v[rows, k].tolist())
    return out


def _avg(gid, g, v, m, count, prometheus_3: bool) -> np.ndarray:
    """sum / count, vectorised over all groups and steps. Prometheus 2.42 keeps a running mean
    per group, which needs one pass per group member (2,000 passes for 8,000 GPUs in 4
    namespaces); sum / count equals it to ~n ulp, and both give the same NaN and +-Inf
    for infinite inputs. Only where a sum of finite values overflows do they differ: those
    groups take the running mean."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # overflow is handled below
        total = group_sum(gid, g, np.where(m, v, 0.0))
        if prometheus_3:
            total = compensated(gid, g, v, m, total)
        mean = total / count
    inf_in = group_sum(gid, g, m & np.isinf(v)) > 0
    overflow = np.isinf(mean) & ~inf_in & (count > 0)
    if overflow.any():
        groups = np.flatnonzero(overflow.any(axis=1))
        rows = np.flatnonzero(npsort.isin(gid, groups))
        sub = np.searchsorted(groups, gid[rows])
        mean[groups] = _incremental_mean(sub, len(groups), v[rows], m[rows])
    return mean


def _ranks(gid: np.ndarray, g: int) -> np.ndarray:
    """Position of each series within its group, in input order."""
    rank = np.empty(len(gid), np.int64)
    seen = np.zeros(g, np.int64)
    for i, x in enumerate(gid.tolist()):
        rank[i] = seen[x]
        seen[x] += 1
    return rank


def _incremental_mean(gid, g, v, m) -> np.ndarray:
    """Prometheus 2.42's running mean: one pass per rank, all groups and steps at once."""
    steps = v.shape[1]
    mean = np.zeros((g, steps))
    n = np.zeros((g, steps))
    rank = _ranks(gid, g)
    with np.errstate(invalid="ignore", divide="ignore"):
        for r in range(int(rank.max()) + 1 if len(rank) else 0):
            rows = np.flatnonzero(rank == r)
            gg, x, mm = gid[rows], v[rows], m[rows]
            cur, nn = mean[gg], n[gg] + mm
            same_inf = np.isinf(cur) & np.isinf(x) & ((cur > 0) == (x > 0))
            finite_x = np.isinf(cur) & ~np.isinf(x) & ~np.isnan(x)
            upd = cur + (x / nn - cur / nn)
            new = np.where(mm & ~(same_inf | finite_x), upd, cur)
            mean[gg], n[gg] = new, nn
    return mean


def _welford_var(gid, g, v, m) -> np.ndarray:
    steps = v.shape[1]
    mean = np.zeros((g, steps))
    acc = np.zeros((g, steps))
    n = np.zeros((g, steps))
    rank = _ranks(gid, g)
    with np.errstate(invalid="ignore", divide="ignore"):
        for r in range(int(rank.max()) + 1 if len(rank) else 0):
            rows = np.flatnonzero(rank == r)
            gg, x, mm = gid[rows], v[rows], m[rows]
            nn = n[gg] + mm
            # Prometheus 2.42 starts each group at mean = first value, variance 0 (so a
            # lone NaN gives 0, not NaN); later values take Welford's update.
            first = mm & (n[gg] == 0)
            delta = x - mean[gg]
            new_mean = np.where(first, x, np.where(mm, mean[gg] + delta / nn, mean[gg]))
            acc[gg] = np.where(mm & ~first, acc[gg] + delta * (x - new_mean), acc[gg])
            mean[gg], n[gg] = new_mean, nn
        return acc / n


def quantile_sorted(q: float, vals: np.ndarray) -> float:
    """Prometheus's quantile() over already sorted values (NaNs first)."""
    n = len(vals)
    if n == 0:
        return math.nan
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    rank = q * (n - 1)
    lower = max(0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    w = rank - math.floor(rank)
    return float(vals[lower] * (1 - w) + vals[upper] * w)


def _group_sort(gid: np.ndarray, g: int, key: np.ndarray, tier: np.ndarray):
    """Sort every step's column by (group, tier, key). Returns (order, start): order[p, k] is
    the row at position p of column k, start[x] the first position of group x."""
    steps = key.shape[1]
    gg = np.broadcast_to(gid[:, None], key.shape)
    order = np.lexsort((key, tier, gg), axis=0) if len(gid) else np.empty((0, steps), np.int64)
    sizes = np.bincount(gid, minlength=g)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return order, start


def _quantile(gid, g, v, m, q) -> np.ndarray:
    """Prometheus's quantile() per group and step: sorted with NaN first, linear interpolation."""
    steps = v.shape[1]
    nan = np.isnan(v)
    tier = np.where(~m, 2, np.where(nan, 0, 1))  # NaN first, values, then absent
    order, start = _group_sort(gid, g, np.where(m & ~nan, v, 0.0), tier)
    sorted_v = np.take_along_axis(v, order, axis=0) if len(gid) else v
    n = group_sum(gid, g, m)
    qv = np.broadcast_to(q.values[None, :], (g, steps))
    rank = qv * (n - 1)
    with np.errstate(invalid="ignore"):
        lower = np.maximum(0, np.floor(rank))
        upper = np.minimum(n - 1, lower + 1)
        w = rank - np.floor(rank)
    cols = np.arange(steps)[None, :]
    ok = n > 0
    # (q outside [0, 1] or NaN is answered below; keep its indices in range meanwhile)
    valid = ok & np.isfinite(rank) & (qv >= 0) & (qv <= 1)
    li = np.where(valid, start[:, None] + lower, 0).astype(np.int64)
    ui = np.where(valid, start[:, None] + upper, 0).astype(np.int64)
    if len(gid):
        out = sorted_v[li, cols] * (1 - w) + sorted_v[ui, cols] * w
    else:
        out = np.full((g, steps), np.nan)
    out = np.where(np.isnan(qv), np.nan, out)
    out = np.where(qv < 0, -np.inf, out)
    out = np.where(qv > 1, np.inf, out)
    return np.where(ok, out, np.nan)


def _topk(s: Series, without: bool, names: list[str], param, bottom: bool) -> Series:
    steps = s.values.shape[1]
    _, gid = _groups(s, without, names)
    g = int(gid.max()) + 1 if len(gid) else 0
    ks = _int64_param(param.values)
    v, m = s.values, s.mask
    nan = np.isnan(v)
    # Per step and group: present non-NaN values by value, then NaN, then absent (never kept).
    tier = np.where(~m, 2, np.where(nan, 1, 0))
    key = np.where(m & ~nan, v if bottom else -v, 0.0)
    order, start = _group_sort(gid, g, key, tier)
    ranks = np.empty_like(order)
    pos = np.arange(len(gid))[:, None].repeat(steps, 1)
    if len(gid):
        np.put_along_axis(ranks, order, pos, axis=0)
        ranks = ranks - start[gid][:, None]  # position within the row's own group
    keep = (ranks < ks[None, :]) & m
    out = Series(list(s.labels), np.where(keep, v, 0.0), keep).compact()
    if steps == 1 and len(out):
        # Instant result order: by group, then rank (Prometheus's output order).
        kept = np.flatnonzero(keep.any(axis=1))
        o = np.lexsort((ranks[kept, 0], gid[kept]))
        out = Series([out.labels[i] for i in o], out.values[o], out.mask[o])
    return out


# Prometheus's convertibleToInt64 bounds: the largest float64 below 2**63, and -2**63.
_MAX_INT64_F = 9223372036854774784.0
_MIN_INT64_F = -9223372036854775808.0


def _int64_param(k: np.ndarray) -> np.ndarray:
    """topk/bottomk's k at every step. Prometheus 2.42 fails the whole query if k at any step
    is NaN or outside int64 (checked even where the vector is empty), then truncates."""
    bad = ~((k <= _MAX_INT64_F) & (k >= _MIN_INT64_F))
    if bad.any():
        raise ExecError(f"Scalar value {_go_float(float(k[np.flatnonzero(bad)[0]]))} overflows int64")
    return np.trunc(k).astype(np.int64)


def _go_float(x: float) -> str:
    """Go's %v of a float64 (only used for values outside int64, so always NaN, ±Inf or e-notation)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(x)


def count_values(s: Series, without: bool, names: list[str], label: str, texts=()) -> Series:
    """count_values; ``texts`` adds points given as (labels, step, value as text): Prometheus 3 counts histogram
    samples by their text (native_values.text)."""
    if not _valid_label_name(label):
        raise ExecError(f'invalid label name "{label}"')
    steps = s.values.shape[1]
    cells: dict[Labels, np.ndarray] = {}
    rows, cols = np.nonzero(s.mask)
    points = [(s.labels[i], k, format_value(s.values[i, k])) for i, k in zip(rows.tolist(), cols.tolist())]
    for labels, k, value in itertools.chain(points, texts):
        base = group_labels(labels, without, names)
        lbls = tuple(sorted([p for p in base if p[0] != label] + [(label, value)]))
        arr = cells.get(lbls)
        if arr is None:
            arr = cells[lbls] = np.zeros(steps)
        arr[k] += 1
    labels = list(cells)
    vals = np.array([cells[l] for l in labels]).reshape(len(labels), steps)
    return Series(labels, vals, vals > 0)


def _valid_label_name(name: str) -> bool:
    return is_label_name(name)
