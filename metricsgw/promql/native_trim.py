"""Prometheus 3's histogram trim operators (FloatHistogram.TrimBuckets of 3.14): ``h </ x`` keeps the
observations below x, ``h >/ x`` those above. A bucket the bound cuts keeps the share of its count on the kept
side (interpolated linearly in custom buckets, on a log scale in exponential ones); the sum is re-estimated
from each kept part's midpoint (geometric in exponential buckets). A histogram nothing is cut from is
returned as it is, its sum untouched."""

from __future__ import annotations

import math

from . import native_math
from .native import CUSTOM_BUCKETS_SCHEMA, FloatHistogram, bound


def trim(h: FloatHistogram, rhs: float, upper: bool) -> FloatHistogram:
    x = native_math.Hist.of(h)
    custom = h.schema == CUSTOM_BUCKETS_SCHEMA
    count = total = 0.0
    trimmed = False
    has_pos, has_neg = any(x.pos.values()), any(x.neg.values())  # before any bucket is trimmed
    sides = {True: x.pos, False: x.neg}
    for positive, buckets in sides.items():
        for idx, c in list(buckets.items()):
            if c == 0:
                continue
            lo, hi = _bounds(x, idx, positive, custom)
            if (hi <= rhs) if upper else (lo >= rhs):  # wholly on the kept side
                count += c
                total += _midpoint(lo, hi, positive, custom) * c
            elif (lo < rhs) if upper else (hi > rhs):  # cut by the bound
                keep, mid = _cut(lo, hi, c, rhs, upper, positive, custom)
                count += keep
                total += mid * keep
                if keep != c:
                    buckets[idx], trimmed = keep, True
            else:
                buckets[idx], trimmed = 0.0, True
    if x.zero_count > 0:
        keep, mid = _cut_zero(x, rhs, upper, has_pos, has_neg)
        if keep != x.zero_count:
            x.zero_count, trimmed = keep, True
        count += keep
        total += mid * keep
    if not trimmed:
        return h
    x.count, x.sum = count, total
    return native_math.compact(x).to_float_histogram()


def _bounds(x: native_math.Hist, idx: int, positive: bool, custom: bool) -> tuple[float, float]:
    if custom:
        cv = x.custom_values
        return (cv[idx - 1] if idx > 0 else -math.inf), (cv[idx] if idx < len(cv) else math.inf)
    if positive:
        return bound(idx - 1, x.schema), bound(idx, x.schema)
    return -bound(idx, x.schema), -bound(idx - 1, x.schema)


def _midpoint(lo: float, hi: float, positive: bool, linear: bool) -> float:
    if math.isinf(lo):
        if math.isinf(hi):
            return 0.0
        return hi / 2 if hi > 0 else hi
    if math.isinf(hi):
        return lo
    if linear:
        return (lo + hi) / 2
    g = math.sqrt(abs(lo * hi))
    return g if positive else -g


def _cut(lo: float, hi: float, c: float, rhs: float, upper: bool, positive: bool, linear: bool):
    """(the count kept of a bucket the bound cuts, the kept part's midpoint): computeBucketTrim."""
    if math.isinf(lo) or math.isinf(hi):
        return _cut_infinite(lo, hi, c, rhs, upper)
    if rhs <= lo:
        under = 0.0
    elif rhs >= hi:
        under = c
    elif linear:
        under = c * (rhs - lo) / (hi - lo)
    else:
        log_lo, log_hi, log_v = math.log2(abs(lo)), math.log2(abs(hi)), math.log2(abs(rhs))
        share = (log_v - log_lo) / (log_hi - log_lo) if rhs > 0 else 1 - (log_v - log_hi) / (log_lo - log_hi)
        under = c * share
    if upper:
        return under, _midpoint(lo, rhs, positive, linear)
    return c - under, _midpoint(rhs, hi, positive, linear)


def _finite(v: float) -> float:
    return 0.0 if math.isinf(v) else v


def _cut_infinite(lo: float, hi: float, c: float, rhs: float, upper: bool):
    """handleInfinityBuckets: an open-ended bucket is kept or dropped whole, but for custom buckets'
    first bucket, taken to start at 0 when its upper bound is positive."""
    if math.isinf(lo) and lo < 0:
        if upper:
            if rhs >= hi:
                return c, 0.0
            if rhs > 0 and hi > 0 and not math.isinf(hi):
                return c * rhs / hi, rhs / 2
            if hi <= 0:
                return c, rhs
            return 0.0, _finite(hi)
        if rhs >= 0 and hi > rhs and not math.isinf(hi):
            return c * (1 - rhs / hi), (rhs + hi) / 2
        return 0.0, _finite(hi)
    if upper:
        return 0.0, _finite(lo)
    if rhs >= lo:
        return c, rhs
    return 0.0, _finite(lo)


def _cut_zero(x: native_math.Hist, rhs: float, upper: bool, has_pos: bool, has_neg: bool):
    lo, hi = -x.zero_threshold, x.zero_threshold
    if has_neg and not has_pos:
        hi = 0.0
    if has_pos and not has_neg:
        lo = 0.0
    c = x.zero_count
    if upper:
        if rhs <= lo:
            return 0.0, 0.0
        if rhs >= hi:
            return c, (lo + hi) / 2
        return c * (rhs - lo) / (hi - lo), (lo + rhs) / 2
    if rhs <= lo:
        return c, (lo + hi) / 2
    if rhs >= hi:
        return 0.0, 0.0
    return c * (hi - rhs) / (hi - lo), (rhs + hi) / 2
