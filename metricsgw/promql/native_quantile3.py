"""histogram_quantile and histogram_fraction of native histograms as Prometheus 3 computes them
(HistogramQuantile and HistogramFraction, promql/quantile.go of 3.14); 2.42's are native.quantile and
native.fraction (--query.promql-compat=2).

What 3.x changed: within an exponential bucket the value is interpolated on a logarithmic scale (the bucket
boundaries of any schema are evenly spaced there), linearly only in the zero bucket and in custom buckets; a
custom-bucket histogram's first bucket reaches down to 0 (or is its upper bound, when that is <= 0) and its
+Inf bucket answers its lower bound; a quantile of 0.5 or more is found walking down from the highest bucket,
and empty buckets are stepped over."""

from __future__ import annotations

import math

from .native import CUSTOM_BUCKETS_SCHEMA, FloatHistogram, all_buckets, go_div


def quantile(q: float, h: FloatHistogram) -> float:
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if h.count == 0 or math.isnan(q):
        return math.nan
    forward = math.isnan(h.sum) or q < 0.5
    buckets = all_buckets(h) if forward else all_buckets(h)[::-1]
    rank = q * h.count if forward else (1 - q) * h.count
    count, lower, upper, in_bucket = 0.0, 0.0, 0.0, 0.0
    for b_lower, b_upper, _, _, c in buckets:
        if c == 0:
            continue
        lower, upper, in_bucket = b_lower, b_upper, c
        count += c
        if count >= rank:
            break
    custom = h.schema == CUSTOM_BUCKETS_SCHEMA
    if not custom and lower < 0 < upper:
        lower, upper = _zero_bounds(h, lower, upper)
    elif custom:
        if lower == -math.inf:
            if upper <= 0:
                return upper
            lower = 0.0
        elif upper == math.inf:
            return lower
    count = min(count, h.count)
    if count < rank:  # only with NaN observations (or rounding): the highest bucket was not enough
        return math.nan if math.isnan(h.sum) else upper
    rank = rank - (count - in_bucket) if forward else count - rank
    fraction = go_div(rank, in_bucket)
    if custom or (lower <= 0 <= upper):
        return lower + (upper - lower) * fraction
    log_lower, log_upper = math.log2(abs(lower)), math.log2(abs(upper))
    if lower > 0:
        return 2.0 ** (log_lower + (log_upper - log_lower) * fraction)
    return -(2.0 ** (log_upper + (log_lower - log_upper) * (1 - fraction)))


def _zero_bounds(h: FloatHistogram, lower: float, upper: float) -> tuple[float, float]:
    """The zero bucket's bounds when the histogram has buckets on one side only: 0 on the other."""
    if not len(h.neg) and len(h.pos):
        return 0.0, upper
    if not len(h.pos) and len(h.neg):
        return lower, 0.0
    return lower, upper


def fraction(lower: float, upper: float, h: FloatHistogram) -> float:
    if h.count == 0 or math.isnan(lower) or math.isnan(upper):
        return math.nan
    if lower >= upper:
        return 0.0
    custom = h.schema == CUSTOM_BUCKETS_SCHEMA
    count = rank = lower_rank = upper_rank = 0.0
    lower_set = upper_set = False
    buckets = all_buckets(h)
    k = 0
    for k, (b_lower, b_upper, _, _, c) in enumerate(buckets):
        count += c
        zero = b_lower <= 0 <= b_upper
        if zero:
            b_lower, b_upper = _zero_bounds(h, b_lower, b_upper)
        below = _below_linear if custom or zero else _below_exponential
        if not lower_set and b_lower >= lower:
            lower_rank, lower_set = rank, True
        if not upper_set and b_lower >= upper:
            upper_rank, upper_set = rank, True
        if lower_set and upper_set:
            break
        if not lower_set and b_lower < lower < b_upper:
            lower_rank, lower_set = below(lower, b_lower, b_upper, c, rank), True
        if not upper_set and b_lower < upper < b_upper:
            upper_rank, upper_set = below(upper, b_lower, b_upper, c, rank), True
        if lower_set and upper_set:
            break
        rank += c
    # Observations of NaN are in the count but in no bucket: only the buckets' total is the whole.
    total = count + sum(b[4] for b in buckets[k + 1:]) if math.isnan(h.sum) else h.count
    lower_rank = total if not lower_set or lower_rank > total else lower_rank
    upper_rank = total if not upper_set or upper_rank > total else upper_rank
    return (upper_rank - lower_rank) / h.count


def _below_linear(v: float, lower: float, upper: float, c: float, rank: float) -> float:
    if lower == -math.inf:  # no interpolation in an infinite bucket: all of it, as the +Inf bucket gives none
        return c
    return rank + c * (v - lower) / (upper - lower)


def _below_exponential(v: float, lower: float, upper: float, c: float, rank: float) -> float:
    log_lower, log_upper, log_v = math.log2(abs(lower)), math.log2(abs(upper)), math.log2(abs(v))
    if v > 0:
        return rank + c * (log_v - log_lower) / (log_upper - log_lower)
    return rank + c * (1 - (log_v - log_upper) / (log_lower - log_upper))
