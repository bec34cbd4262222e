"""Native histograms as PromQL sees them: the stored protobuf bytes decoded to a float histogram,
its buckets, and the functions Prometheus 2.42 evaluates on one (promql/quantile.go,
model/histogram/float_histogram.go at v2.42.0).

Decoding is per histogram (a protobuf parse); everything a query does to a histogram works on the
small bucket arrays of that one histogram. An integer histogram becomes a float one as Prometheus's
``ToFloat`` does (deltas summed up). Custom-bucket histograms (schema -53, not known to 2.42) take
their bounds from ``custom_values``: bucket i is (custom_values[i-1], custom_values[i]], the first
from -Inf, the last to +Inf, as later Prometheus versions define them; they are stored and shown
exactly, and quantiles and fractions walk those buckets with 2.42's algorithm (not the special
cases Prometheus 3 added for them); rate and sum refuse them (native_math.py).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..model import is_stale
from ..remote.proto import remote_v1_pb2 as v1pb
from . import histogram_scalars
from .format import format_json
from .native_bounds import EXPONENTIAL_BOUNDS

CUSTOM_BUCKETS_SCHEMA = -53
GAUGE = 3  # the reset hint of a gauge histogram
MAX_FLOAT = 1.7976931348623157e308


@dataclass
class FloatHistogram:
    schema: int
    zero_threshold: float
    zero_count: float
    count: float
    sum: float
    pos_spans: list[tuple[int, int]]  # (offset, length)
    pos: list[float]  # absolute counts
    neg_spans: list[tuple[int, int]]
    neg: list[float]
    custom_values: tuple[float, ...] = ()
    reset_hint: int = 0  # 0 unknown, 1 yes, 2 no, 3 gauge
    # all_buckets' answer, once asked (a histogram is not changed after it is made)
    buckets: list | None = field(default=None, repr=False, compare=False)


def decode(blob: bytes) -> FloatHistogram:
    return from_message(v1pb.Histogram.FromString(blob))


# What a decoded histogram holds (a FloatHistogram of ~40 buckets as Python floats in lists: ~2.8 KB measured),
# and how many a selection keeps decoded at once: enough for the steps that reuse a histogram (a step shorter
# than the scrape interval picks the same one again), bounded whatever the selection's size.
DECODED_BYTES = 3072
DECODED_KEPT = 4096


class Decoded:
    """Stored histograms, kept as their bytes (an Arrow binary column, ~125 B each at 40 buckets) and made
    FloatHistograms only when a query touches one: a selection loads every sample in its window but touches one
    per step. Counts, sums and reset hints of all are read at once without parsing (histogram_scalars.py).
    Parsed messages are not kept (~1.3 KB each), and decoded histograms only the last ``DECODED_KEPT``: so what a
    selection holds is its bytes, which the storage charged as it read them, and a bounded cache, charged here."""

    def __init__(self, blobs, ctx=None) -> None:
        if isinstance(blobs, pa.ChunkedArray):
            blobs = blobs.combine_chunks()
        arr = blobs if isinstance(blobs, (pa.BinaryArray, pa.LargeBinaryArray)) else pa.array(blobs, pa.binary())
        buffers = arr.buffers()
        wide = np.int64 if isinstance(arr, pa.LargeBinaryArray) else np.int32
        self._n = len(arr)
        self._offsets, self._data = np.zeros(1, np.int64), np.zeros(0, np.uint8)
        if self._n:
            self._offsets = np.frombuffer(buffers[1], wide)[arr.offset:arr.offset + self._n + 1].astype(np.int64)
            if buffers[2] is not None:  # (all of them empty)
                self._data = np.frombuffer(buffers[2], np.uint8)
        self._scalars: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (count, sum, reset hint)
        self._decoded: dict[int, FloatHistogram] = {}  # the last DECODED_KEPT decoded, oldest first
        self._hints: dict[int, int] = {}  # counter reset hints given instead of the stored ones
        if ctx is not None and self._n:
            ctx.charge_bytes(min(self._n, DECODED_KEPT) * DECODED_BYTES, "decoding histograms")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> FloatHistogram:
        h = self._decoded.get(i)
        if h is None:
            h = from_message(self.message(i))
            if i in self._hints:
                h.reset_hint = self._hints[i]
            if len(self._decoded) >= DECODED_KEPT:  # (pop: never a KeyError, should two threads evict at once)
                self._decoded.pop(next(iter(self._decoded), None), None)
            self._decoded[i] = h
        return h

    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        """(the stored bytes, each histogram's start in them and the end: ``offsets[i]:offsets[i + 1]``)."""
        return self._data, self._offsets

    def message(self, i: int) -> "v1pb.Histogram":
        """The stored message of histogram ``i``, parsed now (not kept)."""
        return v1pb.Histogram.FromString(self._data[self._offsets[i]:self._offsets[i + 1]].tobytes())

    @property
    def messages(self) -> "_Messages":
        """The protobuf messages, each parsed when asked for (native_columns reads them without decoding)."""
        return _Messages(self)

    def _read_scalars(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._scalars is None:
            self._scalars = histogram_scalars.read(self._data, self._offsets)
        return self._scalars

    def hints(self, js: np.ndarray) -> np.ndarray:
        """The counter reset hint of each histogram ``js`` names, those given instead of the stored ones
        included, without decoding any."""
        js = np.asarray(js, np.int64)
        out = self._read_scalars()[2][js]
        if self._hints:
            given = self._hints
            for k, j in enumerate(js.tolist()):
                if j in given:
                    out[k] = given[j]
        return out

    def reset_hints(self, idx: list[int]) -> np.ndarray:
        """The stored counter reset hints (stats_decoding.py makes up others)."""
        return self._read_scalars()[2][np.asarray(idx, np.int64)]

    def with_hints(self, hints: dict[int, int]) -> "Decoded":
        """The same histograms, those of ``hints`` with the counter reset hint it gives them."""
        out = Decoded([])
        out._n, out._offsets, out._data, out._scalars = self._n, self._offsets, self._data, self._scalars
        out._hints = {**self._hints, **hints}
        return out

    def stale(self) -> np.ndarray:
        return is_stale(self._read_scalars()[1])

    def counts(self, idx: list[int]) -> np.ndarray:
        return self._read_scalars()[0][np.asarray(idx, np.int64)]

    def sums(self, idx: list[int]) -> np.ndarray:
        return self._read_scalars()[1][np.asarray(idx, np.int64)]


class _Messages:
    """``Decoded``'s messages as a sequence, each parsed when indexed."""

    def __init__(self, hists: Decoded) -> None:
        self._hists = hists

    def __len__(self) -> int:
        return len(self._hists)

    def __getitem__(self, i: int) -> "v1pb.Histogram":
        return self._hists.message(i)


def from_message(h: "v1pb.Histogram") -> FloatHistogram:
    is_float = h.WhichOneof("count") == "count_float"
    zero = h.zero_count_float if h.WhichOneof("zero_count") == "zero_count_float" else float(h.zero_count_int)

    def absolute(deltas, counts) -> list[float]:
        if len(counts):
            return list(counts)
        return list(map(float, itertools.accumulate(deltas)))  # int64 -> float64, as Go's ToFloat

    return FloatHistogram(h.schema, h.zero_threshold, zero, h.count_float if is_float else float(h.count_int),
                          h.sum, [(s.offset, s.length) for s in h.positive_spans],
                          absolute(h.positive_deltas, h.positive_counts),
                          [(s.offset, s.length) for s in h.negative_spans],
                          absolute(h.negative_deltas, h.negative_counts), tuple(h.custom_values), h.reset_hint)


@functools.lru_cache(maxsize=1 << 16)
def bound(idx: int, schema: int) -> float:
    """Upper bound of exponential bucket ``idx`` (getBound in generic.go)."""
    if schema < 0:
        exp = idx << -schema
        if exp == 1024:
            return MAX_FLOAT
        return math.ldexp(1.0, exp)
    frac = EXPONENTIAL_BOUNDS[schema][idx & ((1 << schema) - 1)]
    exp = (idx >> schema) + 1
    if frac == 0.5 and exp == 1025:
        return MAX_FLOAT
    try:
        return math.ldexp(frac, exp)
    except OverflowError:
        return math.inf


def bucket_indexes(spans: list[tuple[int, int]]) -> tuple[int, ...]:
    """The bucket index of each bucket the spans describe (offsets are gaps after the previous span)."""
    return _bucket_indexes(tuple(spans))


@functools.lru_cache(maxsize=4096)
def _bucket_indexes(spans: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    # cached: a series' histograms, and a metric's, mostly share one layout, so a query decoding thousands of
    # them works each layout out once
    out, idx = [], 0
    for offset, length in spans:
        idx += offset
        out.extend(range(idx, idx + length))
        idx += length
    return tuple(out)


def spans_of(indexes) -> list[tuple[int, int]]:
    """The spans of ascending bucket indexes (an offset is the gap after the previous span): bucket_indexes'
    inverse, as Go's span building cuts them."""
    out: list[list[int]] = []
    prev = None
    for idx in indexes:
        if prev is not None and idx == prev + 1:
            out[-1][1] += 1
        else:
            out.append([idx - (prev + 1 if prev is not None else 0), 1])
        prev = idx
    return [(o, n) for o, n in out]


def _custom_bound(idx: int, values: tuple[float, ...]) -> float:
    if idx < 0:
        return -math.inf
    return values[idx] if idx < len(values) else math.inf


# A bucket: (lower, upper, lower inclusive, upper inclusive, count)
Bucket = tuple[float, float, bool, bool, float]


def all_buckets(h: FloatHistogram) -> list[Bucket]:
    """Every bucket in ascending order, as AllBucketIterator yields them: negative buckets from the
    lowest, the zero bucket (only when its count is > 0), positive buckets; bounds clipped to
    the zero bucket's threshold."""
    if h.buckets is None:
        h.buckets = _all_buckets(h)
    return h.buckets


def _all_buckets(h: FloatHistogram) -> list[Bucket]:
    neg, pos = _layout(h.schema, h.zero_threshold, tuple(h.neg_spans), tuple(h.pos_spans), h.custom_values)
    out: list[Bucket] = [(*b, c) for b, c in zip(neg, reversed(h.neg))]
    if h.zero_count > 0 and h.schema != CUSTOM_BUCKETS_SCHEMA:
        out.append((-h.zero_threshold, h.zero_threshold, True, True, h.zero_count))
    out += [(*b, c) for b, c in zip(pos, h.pos)]
    return out


@functools.lru_cache(maxsize=4096)
def _layout(schema: int, zt: float, neg_spans: tuple, pos_spans: tuple, custom_values: tuple):
    """The bounds of a bucket layout, (negative buckets ascending, positive buckets), each bucket
    (lower, upper, lower inclusive, upper inclusive): a series' histograms mostly share one."""
    if schema == CUSTOM_BUCKETS_SCHEMA:
        bounds = [(_custom_bound(i - 1, custom_values), _custom_bound(i, custom_values))
                  for i in bucket_indexes(list(pos_spans))]
        return (), tuple((lo, hi, lo < 0, hi > 0) for lo, hi in bounds)
    neg = []
    for idx in reversed(bucket_indexes(list(neg_spans))):
        lower, upper = -bound(idx, schema), -bound(idx - 1, schema)
        neg.append((lower, min(upper, -zt), lower < 0, upper > 0))  # inclusive: from the unclipped bounds
    pos = []
    for idx in bucket_indexes(list(pos_spans)):
        lower, upper = bound(idx - 1, schema), bound(idx, schema)
        pos.append((max(lower, zt), upper, lower < 0, upper > 0))
    return tuple(neg), tuple(pos)


def to_json(h: FloatHistogram) -> dict:
    """The histogram object of Prometheus 2.42's query API (marshalHistogram): buckets with a
    count of 0 left out; boundaries 0 = (a, b], 1 = [a, b), 2 = (a, b), 3 = [a, b]."""
    out: dict = {"count": format_json(h.count), "sum": format_json(h.sum)}
    buckets = []
    for lower, upper, lower_in, upper_in, c in all_buckets(h):
        if c == 0:
            continue
        kind = (3 if upper_in else 1) if lower_in else (0 if upper_in else 2)
        buckets.append([kind, format_json(lower), format_json(upper), format_json(c)])
    if buckets:
        out["buckets"] = buckets
    return out


def _zero_straddle(h: FloatHistogram, lower: float, upper: float) -> tuple[float, float]:
    if lower < 0 < upper:
        if not len(h.neg) and len(h.pos):
            lower = 0.0
        elif not len(h.pos) and len(h.neg):
            upper = 0.0
    return lower, upper


def quantile(q: float, h: FloatHistogram) -> float:
    """histogramQuantile of Prometheus 2.42."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if h.count == 0 or math.isnan(q):
        return math.nan
    rank = q * h.count
    # The buckets' counts in AllBucketIterator's order, without building the buckets: the walk stops
    # at the first cumulative count >= rank (summed from 0.0 one by one, as Go does).
    zero = [h.zero_count] if h.zero_count > 0 and h.schema != CUSTOM_BUCKETS_SCHEMA else []
    counts = [*reversed(h.neg), *zero, *h.pos]
    if not counts:
        return _quantile_in(h, rank, (0.0, 0.0), 0.0, 0.0)
    at, count = len(counts) - 1, 0.0
    for i, count in enumerate(itertools.accumulate(counts, initial=0.0)):
        if i and count >= rank:
            at = i - 1
            break
    neg, pos = _layout(h.schema, h.zero_threshold, tuple(h.neg_spans), tuple(h.pos_spans), h.custom_values)
    if at < len(neg):
        bounds = neg[at][:2]
    elif zero and at == len(neg):
        bounds = (-h.zero_threshold, h.zero_threshold)
    else:
        bounds = pos[at - len(neg) - len(zero)][:2]
    return _quantile_in(h, rank, bounds, count, counts[at])


def _quantile_in(h: FloatHistogram, rank: float, bounds: tuple[float, float], count: float, in_bucket: float) -> float:
    """The end of histogramQuantile, once the walk stopped in the bucket with these bounds."""
    lower, upper = _zero_straddle(h, *bounds)
    if count > h.count:
        count = h.count
    if count < rank:
        return upper
    rank -= count - in_bucket
    return lower + (upper - lower) * go_div(rank, in_bucket)


def go_div(a: float, b: float) -> float:
    """a / b as Go computes it: IEEE division (x/0 is ±Inf or NaN, never an exception)."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def fraction(lower: float, upper: float, h: FloatHistogram) -> float:
    """histogramFraction of Prometheus 2.42."""
    if h.count == 0 or math.isnan(lower) or math.isnan(upper):
        return math.nan
    if lower >= upper:
        return 0.0
    rank = lower_rank = upper_rank = 0.0
    lower_set = upper_set = False
    for b in all_buckets(h):
        b_lo, b_hi = _zero_straddle(h, b[0], b[1])
        c = b[4]
        if not lower_set and b_lo >= lower:
            lower_rank, lower_set = rank, True
        if not upper_set and b_lo >= upper:
            upper_rank, upper_set = rank, True
        if lower_set and upper_set:
            break
        if not lower_set and b_lo < lower < b_hi:
            lower_rank, lower_set = rank + go_div(c * (lower - b_lo), b_hi - b_lo), True
        if not upper_set and b_lo < upper < b_hi:
            upper_rank, upper_set = rank + go_div(c * (upper - b_lo), b_hi - b_lo), True
        if lower_set and upper_set:
            break
        rank += c
    if not lower_set or lower_rank > h.count:
        lower_rank = h.count
    if not upper_set or upper_rank > h.count:
        upper_rank = h.count
    return (upper_rank - lower_rank) / h.count


def variance(h: FloatHistogram) -> float:
    """histogramVariance of Prometheus 3 (histogram_stdvar; its square root is histogram_stddev): the
    buckets' squared distances from the mean, each bucket at its geometric mean (0 in the zero bucket,
    the arithmetic mean for custom buckets), added with Kahan compensation."""
    mean = go_div(h.sum, h.count)
    total = c = 0.0
    for lower, upper, _, _, n in all_buckets(h):
        if n == 0:
            continue
        if h.schema == CUSTOM_BUCKETS_SCHEMA:
            val = (upper + lower) / 2.0
        elif lower <= 0 <= upper:
            val = 0.0
        else:
            val = math.copysign(math.sqrt(upper * lower), upper)
        inc = n * (val - mean) * (val - mean)
        t = total + inc
        if math.isinf(t):
            c = 0.0
        elif abs(total) >= abs(inc):
            c += (total - t) + inc
        else:
            c += (inc - t) + total
        total = t
    return go_div(total + c, h.count)
