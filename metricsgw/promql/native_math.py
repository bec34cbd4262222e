"""Float-histogram arithmetic as Prometheus 2.42 does it (model/histogram/float_histogram.go):
copy to a coarser schema, add, subtract, scale, compact, counter-reset detection, and
histogramRate (promql/functions.go), for ``rate``/``increase``/``delta`` and ``sum``; and for custom
buckets (schema -53) as Prometheus 3 does: bucket by bucket where the bounds match, else over the bounds
both have (intersectCustomBucketBounds).

Buckets are held as {index: count} per side, in ascending index order: Go's span surgery
(addBucket) places a bucket where its index says and adds into one that exists, which a dict
does with the same float operations in the same order, so results are bit-identical. Empty
buckets are kept until ``compact`` (quantiles see them, as in Go).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from dataclasses import dataclass, field

from ..errors import NotSupported
from . import native
from .native import CUSTOM_BUCKETS_SCHEMA, FloatHistogram, bucket_indexes, bound


@dataclass
class Hist:
    schema: int
    zero_threshold: float
    zero_count: float
    count: float
    sum: float
    pos: dict[int, float] = field(default_factory=dict)
    neg: dict[int, float] = field(default_factory=dict)
    custom_values: tuple[float, ...] = ()  # the upper bounds of custom buckets (the last, +Inf, implied)
    reconciled: bool = False  # custom bounds were intersected to add another (Prometheus 3 tells with an info)

    @classmethod
    def of(cls, h: FloatHistogram) -> "Hist":
        return cls(h.schema, h.zero_threshold, h.zero_count, h.count, h.sum,
                   dict(zip(bucket_indexes(h.pos_spans), h.pos)), dict(zip(bucket_indexes(h.neg_spans), h.neg)),
                   tuple(h.custom_values))

    @property
    def custom(self) -> bool:
        return self.schema == CUSTOM_BUCKETS_SCHEMA

    def copy(self) -> "Hist":
        return Hist(self.schema, self.zero_threshold, self.zero_count, self.count, self.sum, dict(self.pos),
                    dict(self.neg), self.custom_values)

    def to_float_histogram(self) -> FloatHistogram:
        return FloatHistogram(self.schema, self.zero_threshold, self.zero_count, self.count, self.sum,
                              native.spans_of(self.pos), list(self.pos.values()), native.spans_of(self.neg),
                              list(self.neg.values()), self.custom_values)


def _merged(h: Hist, positive: bool, absolute_start: float, target: int) -> list[tuple[int, float]]:
    """floatBucketIterator: buckets reduced to ``target`` schema, those whose upper bound is
    <= ``absolute_start`` left out."""
    if target > h.schema:
        raise ValueError(f"cannot merge from schema {h.schema} to {target}")
    shift = h.schema - target
    out: list[tuple[int, float]] = []
    cur_idx, cur = None, 0.0
    for idx, c in (h.pos if positive else h.neg).items():
        t = idx if shift == 0 else ((idx - 1) >> shift) + 1
        if t != cur_idx:
            if cur_idx is not None and bound(cur_idx, target) > absolute_start:
                out.append((cur_idx, cur))
            cur_idx, cur = t, 0.0
        cur += c
    if cur_idx is not None and bound(cur_idx, target) > absolute_start:
        out.append((cur_idx, cur))
    return out


def _insert(d: dict[int, float], idx: int, c: float) -> dict[int, float]:
    if idx in d:
        d[idx] += c
        return d
    last = next(reversed(d)) if d else None
    d[idx] = c
    if last is not None and idx < last:
        return dict(sorted(d.items()))
    return d


class MixedBuckets(NotSupported):
    """Exponential and custom-bucket histograms in one operation: Prometheus 3 drops the result with a warning
    (callers answering as 3.x catch this); 2.42 had no custom buckets, so under 2.x it is refused."""


def _same_kind(h: Hist, other: Hist) -> None:
    if h.custom != other.custom:
        raise MixedBuckets("arithmetic between exponential and custom-bucket native histograms")


def _onto_bounds(h: Hist, bounds: tuple[float, ...]) -> dict[int, float]:
    """A custom-bucket histogram's buckets merged into the (coarser) ``bounds``: each bucket goes to the first
    bound at or above its own upper bound (+Inf: the last)."""
    out: dict[int, float] = {}
    for idx, c in h.pos.items():
        upper = h.custom_values[idx] if idx < len(h.custom_values) else math.inf
        out = _insert(out, bisect.bisect_left(bounds, upper), c)
    return out


def _common_bounds(h: Hist, other: Hist) -> tuple[float, ...]:
    return tuple(sorted(set(h.custom_values) & set(other.custom_values)))


def _add_custom(h: Hist, other: Hist, sign: float) -> Hist:
    h.count += sign * other.count
    h.sum += sign * other.sum
    theirs = other.pos
    if other.custom_values != h.custom_values:
        bounds = _common_bounds(h, other)
        h.pos, theirs, h.custom_values = _onto_bounds(h, bounds), _onto_bounds(other, bounds), bounds
        h.reconciled = True
    for idx, c in theirs.items():
        h.pos = _insert(h.pos, idx, c if sign > 0 else c * -1)
    return h


def copy_to_schema(h: Hist, target: int) -> Hist:
    if target == h.schema:
        return h.copy()
    c = Hist(target, h.zero_threshold, h.zero_count, h.count, h.sum)
    for idx, n in _merged(h, True, 0.0, target):
        c.pos = _insert(c.pos, idx, n)
    for idx, n in _merged(h, False, 0.0, target):
        c.neg = _insert(c.neg, idx, n)
    return c


def _positive_buckets(h: Hist):
    for idx, c in h.pos.items():
        yield bound(idx - 1, h.schema), bound(idx, h.schema), c


def _negative_buckets(h: Hist):
    for idx, c in h.neg.items():
        yield -bound(idx, h.schema), -bound(idx - 1, h.schema), c


def zero_count_for_larger_threshold(h: Hist, larger: float) -> tuple[float, float]:
    if larger == h.zero_threshold:
        return h.zero_count, larger
    if larger < h.zero_threshold:
        raise ValueError(f"new threshold {larger} is less than old threshold {h.zero_threshold}")
    while True:
        count = h.zero_count
        for lower, upper, c in _positive_buckets(h):
            if lower >= larger:
                break
            count += c
            if upper > larger:
                if c != 0:
                    larger = upper
                break
        again = False
        for lower, upper, c in _negative_buckets(h):
            if upper <= -larger:
                break
            count += c
            if lower < -larger:
                if c != 0:
                    larger = -lower
                    again = True
                break
        if not again:
            return count, larger


def compact(h: Hist) -> Hist:
    h.pos = {i: c for i, c in h.pos.items() if c != 0}
    h.neg = {i: c for i, c in h.neg.items() if c != 0}
    return h


def _trim_buckets_in_zero_bucket(h: Hist) -> None:
    for idx, (lower, _, _) in zip(list(h.pos), list(_positive_buckets(h))):
        if lower >= h.zero_threshold:
            break
        h.pos[idx] = 0.0
    for idx, (_, upper, _) in zip(list(h.neg), list(_negative_buckets(h))):
        if upper <= -h.zero_threshold:
            break
        h.neg[idx] = 0.0
    compact(h)


def _reconcile_zero_buckets(h: Hist, other: Hist) -> float:
    other_count, other_threshold = other.zero_count, other.zero_threshold
    while other_threshold != h.zero_threshold:
        if h.zero_threshold > other_threshold:
            other_count, other_threshold = zero_count_for_larger_threshold(other, h.zero_threshold)
        if other_threshold > h.zero_threshold:
            h.zero_count, h.zero_threshold = zero_count_for_larger_threshold(h, other_threshold)
            _trim_buckets_in_zero_bucket(h)
    return other_count


def add(h: Hist, other: Hist, sign: float = 1.0) -> Hist:
    """h += other (sign -1: h -= other), other reduced to h's schema; h is changed."""
    _same_kind(h, other)
    if h.custom:
        return _add_custom(h, other, sign)
    other_zero = _reconcile_zero_buckets(h, other)
    if sign > 0:
        h.zero_count += other_zero
        h.count += other.count
        h.sum += other.sum
    else:
        h.zero_count -= other_zero
        h.count -= other.count
        h.sum -= other.sum
    for positive in (True, False):
        d = h.pos if positive else h.neg
        for idx, c in _merged(other, positive, h.zero_threshold, h.schema):
            d = _insert(d, idx, c if sign > 0 else c * -1)
        if positive:
            h.pos = d
        else:
            h.neg = d
    return h


def scale(h: Hist, factor: float) -> Hist:
    h.zero_count *= factor
    h.count *= factor
    h.sum *= factor
    h.pos = {i: c * factor for i, c in h.pos.items()}
    h.neg = {i: c * factor for i, c in h.neg.items()}
    return h


def _detect_bucket_reset(curr: list[tuple[int, float]], prev: list[tuple[int, float]]) -> bool:
    """detectReset: a bucket of prev that curr lacks (with a count) or holds less of."""
    if not prev:
        return False
    ci = 0
    for p_idx, p_count in prev:
        while ci < len(curr) and curr[ci][0] < p_idx:
            ci += 1
        if ci == len(curr) or curr[ci][0] > p_idx:
            if p_count != 0:
                return True
        elif curr[ci][1] < p_count:
            return True
    return False


def _above(keys: list[int], schema: int, threshold: float) -> int:
    """How many of these ascending bucket indexes lie inside the zero bucket (bound <= threshold)."""
    k = 0
    while k < len(keys) and bound(keys[k], schema) <= threshold:
        k += 1
    return k


def _same_layout_reset(curr: Hist, prev: Hist) -> bool:
    """detect_reset when both have the same buckets (the usual case): a bucket that shrank."""
    for side_c, side_p in ((curr.pos, prev.pos), (curr.neg, prev.neg)):
        start = _above(list(side_p), curr.schema, curr.zero_threshold)
        if any(c < p for c, p in itertools.islice(zip(side_c.values(), side_p.values()), start, None)):
            return True
    return False


def detect_reset(curr: Hist, prev: Hist) -> bool:
    if curr.custom or prev.custom:
        if curr.count < prev.count or not (curr.custom and prev.custom):
            return True
        c, p = curr.pos, prev.pos
        if curr.custom_values != prev.custom_values:  # compared over the bounds both have
            bounds = _common_bounds(curr, prev)
            c, p = _onto_bounds(curr, bounds), _onto_bounds(prev, bounds)
        return _detect_bucket_reset(sorted(c.items()), sorted(p.items()))
    if curr.count < prev.count or curr.schema > prev.schema or curr.zero_threshold < prev.zero_threshold:
        return True
    if curr.schema == prev.schema and curr.zero_threshold == prev.zero_threshold \
            and curr.pos.keys() == prev.pos.keys() and curr.neg.keys() == prev.neg.keys():
        return curr.zero_count < prev.zero_count or _same_layout_reset(curr, prev)
    prev_zero, threshold = zero_count_for_larger_threshold(prev, curr.zero_threshold)
    if threshold != curr.zero_threshold or curr.zero_count < prev_zero:
        return True
    for positive in (True, False):
        if _detect_bucket_reset(_merged(curr, positive, curr.zero_threshold, curr.schema),
                                _merged(prev, positive, curr.zero_threshold, curr.schema)):
            return True
    return False


def histogram_rate(points: list[Hist], is_counter: bool, resets: list[bool] | None = None,
                   null_first_reset: bool = False, reconciled=None) -> Hist:
    """The increase over ``points`` (histogramRate of 2.42), not yet extrapolated. ``resets[j]``,
    when given, is ``detect_reset(points[j + 1], points[j])`` (windows over the same samples share
    them, so callers work each pair out once). ``null_first_reset``: Prometheus 3 counts from an empty
    histogram when the second sample is a reset, so the first one's buckets (or kind) do not matter.
    ``reconciled``, when given, is called with "subtraction" (the first histogram taken from the last) or
    "addition" (one before a reset added back) when custom bounds were intersected to do it: Prometheus 3
    tells each with an info."""
    if is_counter and null_first_reset and len(points) > 1:
        first_reset = resets[0] if resets is not None else detect_reset(points[1], points[0])
        if first_reset:
            points = [Hist(points[1].schema, 0.0, 0.0, 0.0, 0.0, custom_values=points[1].custom_values), *points[1:]]
            resets = [False, *resets[1:]] if resets is not None else None
    prev, last = points[0], points[-1]
    for curr in points[1:]:
        _same_kind(prev, curr)
    min_schema = min(prev.schema, last.schema)
    if is_counter:
        for curr in points[1:-1]:
            min_schema = min(min_schema, curr.schema)
    h = copy_to_schema(last, min_schema)
    add(h, prev, -1.0)
    _tell_reconciled(h, "subtraction", reconciled)
    if is_counter:
        for j, curr in enumerate(points[1:]):
            if resets[j] if resets is not None else detect_reset(curr, prev):
                add(h, prev)
                _tell_reconciled(h, "addition", reconciled)
            prev = curr
    return compact(h)


def _tell_reconciled(h: Hist, operation: str, reconciled) -> None:
    """Report (and clear, so the next operation is told apart) that ``h``'s last operation intersected bounds."""
    if h.reconciled and reconciled is not None:
        reconciled(operation)
    h.reconciled = False


def compensated_sum(points: list[Hist], divide_by: float = 1.0) -> Hist:
    """The sum of ``points`` (each divided by ``divide_by`` first: a mean that does not overflow) as
    Prometheus 3's Kahan-compensated additions give it: the layout ``sum_into`` arrives at, and each count,
    the sum and each bucket added as if exactly (math.fsum), which Kahan summation approaches."""
    layout = None
    for p in points:
        layout = sum_into(layout, p)
    mapped = [add(Hist(layout.schema, layout.zero_threshold, 0.0, 0.0, 0.0, custom_values=layout.custom_values), p)
              for p in points]

    def total(values: list[float]) -> float:
        values = [v / divide_by for v in values]
        try:
            return math.fsum(values)
        except (OverflowError, ValueError):  # infinities (or their difference): as plain adding gives them
            return sum(values)

    def side(name: str) -> dict[int, float]:
        keys = sorted({k for p in mapped for k in getattr(p, name)})
        return {k: total([getattr(p, name).get(k, 0.0) for p in mapped]) for k in keys}

    return Hist(layout.schema, layout.zero_threshold, total([p.zero_count for p in mapped]),
                total([p.count for p in mapped]), total([p.sum for p in mapped]), side("pos"), side("neg"),
                layout.custom_values, layout.reconciled)


def sum_into(acc: Hist | None, h: Hist) -> Hist:
    """sum's step for one more histogram (2.42: added into the finer-or-equal schema's side)."""
    if acc is None:
        return h.copy()
    if h.schema >= acc.schema:
        return add(acc, h)
    out = add(h.copy(), acc)
    out.reconciled |= acc.reconciled
    return out


def scaled(h: "native.FloatHistogram", by: float, divide: bool) -> "native.FloatHistogram":
    """FloatHistogram.Mul / Div of Prometheus 3 (division by zero drops the buckets; a negative factor makes
    the result a gauge)."""
    if divide and by == 0:
        return dataclasses.replace(h, zero_count=native.go_div(h.zero_count, by), count=native.go_div(h.count, by),
                                   sum=native.go_div(h.sum, by), pos_spans=[], pos=[], neg_spans=[], neg=[],
                                   buckets=None)
    f = (lambda c: c / by) if divide else (lambda c: c * by)
    return dataclasses.replace(h, zero_count=f(h.zero_count), count=f(h.count), sum=f(h.sum),
                               pos=[f(c) for c in h.pos], neg=[f(c) for c in h.neg], buckets=None,
                               reset_hint=native.GAUGE if by < 0 else h.reset_hint)


def same(a: Hist, b: Hist) -> bool:
    """FloatHistogram.Equals: the same layout and counts once empty buckets are dropped (NaN sums equal)."""
    a, b = compact(a.copy()), compact(b.copy())
    return (a.schema, a.zero_threshold, a.zero_count, a.count, a.pos, a.neg, a.custom_values) == \
        (b.schema, b.zero_threshold, b.zero_count, b.count, b.pos, b.neg, b.custom_values) and \
        (a.sum == b.sum or (math.isnan(a.sum) and math.isnan(b.sum)))
