"""Prometheus's native histogram chunks (tsdb/chunkenc/histogram.go, float_histogram.go, varbit.go,
histogram_meta.go), for remote read's STREAMED_XOR_CHUNKS answer: a series' stored histograms (the
remote-write ``Histogram`` bytes) -> chunks a Prometheus reader decodes.

A chunk is a big-endian uint16 sample count, a byte whose top two bits are the counter reset header,
and a bit stream: the layout (zero threshold, schema, positive and negative spans, custom bounds of
schema -53), then the first sample (varbit timestamp, counts, raw sum, buckets), then per sample the
deltas-of-deltas of timestamp, counts and buckets and the XOR of the sum. An integer histogram
goes into a HISTOGRAM chunk (bucket counts as deltas, as remote write sends them); a float one into a
FLOAT_HISTOGRAM chunk (every count XOR-encoded against the previous one).

Where a chunk is cut, and its header, follow the appenders' ``appendable``: a new chunk at a counter
reset (count, zero count or a bucket lower, a bucket gone, an explicit reset hint, other custom bounds;
header "counter reset"), at a schema or zero threshold change or after a stale marker (header
"unknown"), at a change between gauge and counter histograms (header "gauge" for a gauge chunk), and
every ``SAMPLES_PER_CHUNK`` samples. One difference, in bytes only: where Prometheus re-encodes a chunk
to take in buckets that appear (``recode``), this cuts a new chunk with header "not a counter reset";
a reader decodes the same histograms with the same counter reset hints.

Bit for bit as Prometheus writes them, including its bit stream's quirk (a write of whole bytes that
ends on a byte boundary leaves an empty byte after it; tests/remote/test_histogram_chunks.py checks
chunks Prometheus 2.42 produced). Per-sample Python: remote read of histograms is not a hot path, and a
histogram is a protobuf to parse anyway.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from ..model import STALE_NAN_BITS
from .proto import remote_v1_pb2 as v1pb

HISTOGRAM, FLOAT_HISTOGRAM = 2, 3  # prompb.Chunk.Encoding, the same numbers as chunkenc.Encoding

UNKNOWN_RESET, COUNTER_RESET, NOT_COUNTER_RESET, GAUGE_TYPE = 0x00, 0x80, 0x40, 0xC0
_HINT_HEADER = {1: COUNTER_RESET, 3: GAUGE_TYPE}  # remote write's reset_hint YES, GAUGE
_HINT_YES, _HINT_GAUGE = 1, 3

SAMPLES_PER_CHUNK = 120
CUSTOM_BUCKETS_SCHEMA = -53


@dataclass
class _Hist:
    """One stored histogram as the chunk writes it (a stale marker emptied as Prometheus empties it)."""

    is_float: bool
    schema: int
    zero_threshold: float
    pos_spans: tuple[tuple[int, int], ...]  # (offset, length)
    neg_spans: tuple[tuple[int, int], ...]
    custom_values: tuple[float, ...]
    count: float  # int for an integer histogram
    zero_count: float
    sum: float
    pos: list  # integer: deltas as sent; float: absolute counts
    neg: list
    hint: int
    stale: bool


def parse(blob: bytes) -> _Hist:
    m = v1pb.Histogram.FromString(blob)
    is_float = m.WhichOneof("count") == "count_float"
    if _bits(m.sum) == STALE_NAN_BITS:  # appendHistogram: "emptying out other fields", the layout too
        return _Hist(is_float, 0, 0.0, (), (), (), 0, 0, m.sum, [], [], m.reset_hint, True)
    spans = lambda ss: tuple((s.offset, s.length) for s in ss)  # noqa: E731
    if is_float:
        return _Hist(True, m.schema, m.zero_threshold, spans(m.positive_spans), spans(m.negative_spans),
                     tuple(m.custom_values), m.count_float, m.zero_count_float, m.sum, list(m.positive_counts),
                     list(m.negative_counts), m.reset_hint, False)
    return _Hist(False, m.schema, m.zero_threshold, spans(m.positive_spans), spans(m.negative_spans),
                 tuple(m.custom_values), m.count_int, m.zero_count_int, m.sum, list(m.positive_deltas),
                 list(m.negative_deltas), m.reset_hint, False)


def chunks(t: list[int], blobs: list[bytes], per_chunk: int = SAMPLES_PER_CHUNK) -> list[tuple[int, int, int, bytes]]:
    """One series' histograms (ascending ``t``) as [(min_time_ms, max_time_ms, encoding, bytes)]."""
    out: list[tuple[int, int, int, bytes]] = []
    open_chunk: _Chunk | None = None
    prev: _Hist | None = None
    for ts, blob in zip(t, blobs):
        h = parse(blob)
        if open_chunk is not None and h.stale:
            h.is_float = open_chunk.is_float  # a stale marker continues its series' kind of chunk
        header = None if open_chunk is None else open_chunk.cut_header(h, prev, per_chunk)
        if open_chunk is None or header is not None:
            if open_chunk is not None:
                out.append(open_chunk.finish())
            if header is None or h.hint in _HINT_HEADER:  # a series' first chunk, or one the sender marked
                header = _HINT_HEADER.get(h.hint, header if header is not None else UNKNOWN_RESET)
            open_chunk = (_FloatChunk if h.is_float else _IntChunk)(header)
        open_chunk.append(ts, h)
        prev = h
    if open_chunk is not None:
        out.append(open_chunk.finish())
    return out


# ---------------------------------------------------------------- the bit stream


class _Bits:
    """Prometheus's bstream, written MSB first. Each ``write`` is one writeBits call: the quirk of an empty
    byte after whole bytes that end on a byte boundary depends on the calls, not only on the bits."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.pending = 0  # bits in acc not yet in out
        self.last_width = 0

    def write(self, value: int, width: int) -> None:
        self.acc = (self.acc << width) | (value & ((1 << width) - 1))
        self.pending += width
        while self.pending >= 8:
            self.pending -= 8
            self.out.append((self.acc >> self.pending) & 0xFF)
        self.acc &= (1 << self.pending) - 1
        self.last_width = width

    def getvalue(self) -> bytes:
        if self.pending:
            return bytes(self.out) + bytes([(self.acc << (8 - self.pending)) & 0xFF])
        if self.last_width and self.last_width % 8 == 0:  # writeByte appends the next byte before it is needed
            return bytes(self.out) + b"\x00"
        return bytes(self.out)

    def varbit_int(self, val: int) -> None:
        self._varbit(val, lambda size: -((1 << (size - 1)) - 1) <= val <= 1 << (size - 1))

    def varbit_uint(self, val: int) -> None:
        self._varbit(val, lambda size: val < 1 << size)

    def _varbit(self, val: int, fits) -> None:
        """putVarbitInt/putVarbitUint: 0 in one bit, else the first bucket whose ``size`` bits ``fits`` it."""
        if val == 0:
            self.write(0, 1)
            return
        for prefix, plen, size in _VARBIT:
            if fits(size):
                self.write(prefix, plen)
                self.write(val, size)
                return
        self.write(0xFF, 8)
        self.write(val, 64)

    def float_bits(self, x: float) -> None:
        self.write(_bits(x), 64)


# (prefix, prefix bits, value bits) of varbit.go's buckets
_VARBIT = ((0b10, 2, 3), (0b110, 3, 6), (0b1110, 4, 9), (0b11110, 5, 12), (0b111110, 6, 18), (0b1111110, 7, 25),
           (0b11111110, 8, 56))


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


class _Xor:
    """xorWrite's state for one value: the previous value and its leading/trailing-zero window."""

    __slots__ = ("value", "leading", "trailing")

    def __init__(self, value: float) -> None:
        self.value, self.leading, self.trailing = value, 0xFF, 0

    def write(self, b: _Bits, new: float) -> None:
        delta = _bits(new) ^ _bits(self.value)
        self.value = new
        if delta == 0:
            b.write(0, 1)
            return
        b.write(1, 1)
        leading = min(64 - delta.bit_length(), 31)
        trailing = (delta & -delta).bit_length() - 1
        if self.leading != 0xFF and leading >= self.leading and trailing >= self.trailing:
            b.write(0, 1)
            b.write(delta >> self.trailing, 64 - self.leading - self.trailing)
            return
        self.leading, self.trailing = leading, trailing
        b.write(1, 1)
        b.write(leading, 5)
        sigbits = 64 - leading - trailing
        b.write(sigbits, 6)  # 64 is written as 0: it does not fit, and 0 significant bits never occur
        b.write(delta >> trailing, sigbits)


def _write_layout(b: _Bits, h: _Hist) -> None:
    _zero_threshold(b, h.zero_threshold)
    b.varbit_int(h.schema)
    for spans in (h.pos_spans, h.neg_spans):
        b.varbit_uint(len(spans))
        for offset, length in spans:
            b.varbit_uint(length)
            b.varbit_int(offset)
    if h.schema == CUSTOM_BUCKETS_SCHEMA:
        b.varbit_uint(len(h.custom_values))
        for bound in h.custom_values:
            _custom_bound(b, bound)


def _zero_threshold(b: _Bits, threshold: float) -> None:
    if threshold == 0:
        b.write(0, 8)
        return
    frac, exp = math.frexp(threshold)
    if frac != 0.5 or exp < -242 or exp > 11:
        b.write(255, 8)
        b.float_bits(threshold)
        return
    b.write(exp + 243, 8)


def _custom_bound(b: _Bits, f: float) -> None:
    tf = f * 1000
    whole = not (math.isnan(f) or math.isinf(f)) and _go_round(tf) / 1000 == f  # isWholeWhenMultiplied
    if tf < 0 or tf > 33554430 or not whole:
        b.write(0, 1)
        b.float_bits(f)
        return
    b.varbit_uint(int(_go_round(tf)) + 1)


def _go_round(x: float) -> float:
    """Go's math.Round: half away from zero (Python's round is half to even)."""
    return math.floor(x + 0.5) if x >= 0 else math.ceil(x - 0.5)


# ---------------------------------------------------------------- chunks


class _Chunk:
    is_float = False
    encoding = 0

    def __init__(self, header: int) -> None:
        self.header = header
        self.b = _Bits()
        self.n = 0
        self.mint = self.maxt = 0
        self.first: _Hist | None = None
        self.t = 0
        self.t_delta = 0

    def finish(self) -> tuple[int, int, int, bytes]:
        return self.mint, self.maxt, self.encoding, struct.pack(">HB", self.n, self.header) + self.b.getvalue()

    def append(self, t: int, h: _Hist) -> None:
        if self.n == 0:
            self.first, self.mint = h, t
            _write_layout(self.b, h)
            self.b.varbit_int(t)
            self._first(h)
            self.t_delta = 0
        else:
            t_delta = t - self.t
            self.b.varbit_int(t_delta - self.t_delta)
            self.t_delta = t_delta
            self._next(h)
        self.t, self.maxt = t, t
        self.n += 1

    def cut_header(self, h: _Hist, prev: _Hist, per_chunk: int) -> int | None:
        """None when ``h`` goes into this chunk, else the header of the chunk it opens."""
        gauge = h.hint == _HINT_GAUGE
        if h.is_float != self.is_float:
            return UNKNOWN_RESET
        if self.header == GAUGE_TYPE or gauge:
            if self.header != GAUGE_TYPE:
                return GAUGE_TYPE
            if not gauge:
                return NOT_COUNTER_RESET  # appendable: a counter histogram after a gauge chunk
            if h.stale or (not prev.stale and _same_layout(h, self.first)):
                return GAUGE_TYPE if self.n >= per_chunk else None
            return GAUGE_TYPE
        reset = _reset_header(h, prev)
        if reset is None and not h.stale and not _same_layout(h, self.first):
            reset = NOT_COUNTER_RESET
        if reset is None and self.n >= per_chunk:
            reset = NOT_COUNTER_RESET
        return reset

    def _first(self, h: _Hist) -> None:
        raise NotImplementedError

    def _next(self, h: _Hist) -> None:
        raise NotImplementedError


def _same_layout(a: _Hist, b: _Hist) -> bool:
    return (a.schema == b.schema and a.zero_threshold == b.zero_threshold and a.pos_spans == b.pos_spans
            and a.neg_spans == b.neg_spans and a.custom_values == b.custom_values)


def _reset_header(h: _Hist, prev: _Hist) -> int | None:
    """appendable's verdict on ``h`` after ``prev`` in a counter chunk: None to append, else the new chunk's header."""
    if h.hint == _HINT_YES:
        return COUNTER_RESET
    if h.stale:
        return None
    if prev.stale:
        return UNKNOWN_RESET  # after a stale marker a chunk takes only stale markers
    if h.count < prev.count:
        return COUNTER_RESET
    if h.schema != prev.schema or h.zero_threshold != prev.zero_threshold:
        return UNKNOWN_RESET
    if h.schema == CUSTOM_BUCKETS_SCHEMA and h.custom_values != prev.custom_values:
        return COUNTER_RESET
    if h.zero_count < prev.zero_count:
        return COUNTER_RESET
    for side in ("pos", "neg"):
        if _bucket_lower(_absolute(prev, side), _absolute(h, side)):
            return COUNTER_RESET
    return None


def _absolute(h: _Hist, side: str) -> dict[int, float]:
    """Bucket index -> count of one side of a histogram."""
    spans, values = (h.pos_spans, h.pos) if side == "pos" else (h.neg_spans, h.neg)
    out: dict[int, float] = {}
    idx, k, running = 0, 0, 0
    for offset, length in spans:
        idx += offset
        for _ in range(length):
            if h.is_float:
                out[idx] = values[k]
            else:
                running += values[k]
                out[idx] = running
            idx += 1
            k += 1
    return out


def _bucket_lower(before: dict[int, float], after: dict[int, float]) -> bool:
    """A bucket's count went down, or a bucket that held counts is gone (expandSpansAndBuckets' "not ok")."""
    return any(after.get(idx, 0) < count for idx, count in before.items())


class _IntChunk(_Chunk):
    encoding = HISTOGRAM

    def _first(self, h: _Hist) -> None:
        b = self.b
        b.varbit_uint(h.count)
        b.varbit_uint(h.zero_count)
        b.float_bits(h.sum)
        for v in h.pos + h.neg:
            b.varbit_int(v)
        self.cnt, self.zcnt, self.cnt_delta, self.zcnt_delta = h.count, h.zero_count, 0, 0
        self.sum = _Xor(h.sum)
        self.buckets = h.pos + h.neg
        self.bucket_deltas = [0] * len(self.buckets)

    def _next(self, h: _Hist) -> None:
        b = self.b
        cnt_delta, zcnt_delta = h.count - self.cnt, h.zero_count - self.zcnt
        b.varbit_int(0 if h.stale else cnt_delta - self.cnt_delta)
        b.varbit_int(0 if h.stale else zcnt_delta - self.zcnt_delta)
        self.cnt, self.zcnt, self.cnt_delta, self.zcnt_delta = h.count, h.zero_count, cnt_delta, zcnt_delta
        self.sum.write(b, h.sum)
        for i, v in enumerate(h.pos + h.neg):  # none for a stale marker
            delta = v - self.buckets[i]
            b.varbit_int(delta - self.bucket_deltas[i])
            self.bucket_deltas[i] = delta
            self.buckets[i] = v


class _FloatChunk(_Chunk):
    is_float = True
    encoding = FLOAT_HISTOGRAM

    def _first(self, h: _Hist) -> None:
        b = self.b
        for x in (h.count, h.zero_count, h.sum, *h.pos, *h.neg):
            b.float_bits(x)
        self.cnt, self.zcnt, self.sum = _Xor(h.count), _Xor(h.zero_count), _Xor(h.sum)
        self.buckets = [_Xor(x) for x in h.pos + h.neg]

    def _next(self, h: _Hist) -> None:
        b = self.b
        self.cnt.write(b, h.count)
        self.zcnt.write(b, h.zero_count)
        self.sum.write(b, h.sum)
        for state, x in zip(self.buckets, h.pos + h.neg):  # none for a stale marker
            state.write(b, x)
