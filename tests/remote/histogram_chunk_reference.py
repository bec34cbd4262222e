"""A reference decoder of Prometheus's histogram chunks, written from its readers (histogramIterator.Next,
floatHistogramIterator.Next, readVarbitInt/Uint, readHistogramChunkLayout in tsdb/chunkenc), not from
metricsgw's encoder. Tests decode with it both the chunks real Prometheus streams and ours.

Each sample decodes to a dict: t, count, zero_count, sum_bits, schema, zero_threshold, pos_spans,
neg_spans ((offset, length) tuples), custom_values, pos, neg (integer chunks: bucket deltas as remote
write sends them; float chunks: absolute counts; counts of a float chunk as float bit patterns)."""

from __future__ import annotations

import math
import struct

HEADER_MASK = 0xC0
UNKNOWN_RESET, COUNTER_RESET, NOT_COUNTER_RESET, GAUGE_TYPE = 0x00, 0x80, 0x40, 0xC0
STALE_NAN_BITS = 0x7FF0000000000002


class BitReader:
    def __init__(self, data: bytes) -> None:
        self.value = int.from_bytes(data, "big")
        self.left = 8 * len(data)

    def bits(self, n: int) -> int:
        if n > self.left:
            raise EOFError("chunk ends in the middle of a value")
        self.left -= n
        return (self.value >> self.left) & ((1 << n) - 1)

    def _prefix(self) -> int:
        d = 0
        for _ in range(8):
            d <<= 1
            if self.bits(1) == 0:
                break
            d |= 1
        return d

    _SIZES = {0b0: 0, 0b10: 3, 0b110: 6, 0b1110: 9, 0b11110: 12, 0b111110: 18, 0b1111110: 25, 0b11111110: 56}

    def varbit_int(self) -> int:
        d = self._prefix()
        if d == 0b11111111:
            v = self.bits(64)
            return v - (1 << 64) if v >> 63 else v
        sz = self._SIZES[d]
        if sz == 0:
            return 0
        v = self.bits(sz)
        return v - (1 << sz) if v > (1 << (sz - 1)) else v

    def varbit_uint(self) -> int:
        d = self._prefix()
        if d == 0b11111111:
            return self.bits(64)
        sz = self._SIZES[d]
        return self.bits(sz) if sz else 0


class XorState:
    def __init__(self, bits: int) -> None:
        self.bits, self.leading, self.trailing = bits, 0, 0

    def read(self, r: BitReader) -> int:
        if r.bits(1) == 0:
            return self.bits
        if r.bits(1) == 1:
            self.leading = r.bits(5)
            sig = r.bits(6) or 64
            self.trailing = 64 - self.leading - sig
        sig = 64 - self.leading - self.trailing
        self.bits ^= r.bits(sig) << self.trailing
        return self.bits


def from_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def absolute_buckets(spans, values, deltas: bool) -> dict[int, float]:
    """Bucket index -> absolute count of one side of a histogram (``values`` deltas or counts), empty buckets left
    out: Prometheus re-encodes a chunk to take in a new bucket, with zeros in the samples before it, where
    metricsgw starts a new chunk; both are the same histograms."""
    out, idx, k, running = {}, 0, 0, 0
    for offset, length in spans:
        idx += offset
        for _ in range(length):
            running = running + values[k] if deltas else values[k]
            if running:
                out[idx] = float(running)
            idx, k = idx + 1, k + 1
    return out


def _layout(r: BitReader) -> dict:
    b = r.bits(8)
    zt = 0.0 if b == 0 else from_bits(r.bits(64)) if b == 255 else math.ldexp(0.5, b - 243)
    schema = r.varbit_int()
    spans = []
    for _ in range(2):
        side = []
        for _ in range(r.varbit_uint()):
            length = r.varbit_uint()
            side.append((r.varbit_int(), length))
        spans.append(tuple(side))
    custom = []
    if schema == -53:
        for _ in range(r.varbit_uint()):
            v = r.varbit_uint()
            custom.append(from_bits(r.bits(64)) if v == 0 else (v - 1) / 1000)
    return {"schema": schema, "zero_threshold": zt, "pos_spans": spans[0], "neg_spans": spans[1],
            "custom_values": tuple(custom)}


def decode(data: bytes, encoding: int) -> tuple[int, list[dict]]:
    """(counter reset header, samples) of a HISTOGRAM (2) or FLOAT_HISTOGRAM (3) chunk."""
    n = int.from_bytes(data[:2], "big")
    header = data[2] & HEADER_MASK
    r = BitReader(data[3:])
    out: list[dict] = []
    if n == 0:
        return header, out
    layout = _layout(r)
    npos = sum(length for _, length in layout["pos_spans"])
    nneg = sum(length for _, length in layout["neg_spans"])
    t = r.varbit_int()
    if encoding == 2:
        cnt, zcnt = r.varbit_uint(), r.varbit_uint()
        s = XorState(r.bits(64))
        buckets = [r.varbit_int() for _ in range(npos + nneg)]
        deltas = [0] * len(buckets)
        t_delta = cnt_delta = zcnt_delta = 0
        out.append(_sample(layout, t, cnt, zcnt, s.bits, buckets, npos))
        for _ in range(n - 1):
            t_delta += r.varbit_int()
            t += t_delta
            cnt_delta += r.varbit_int()
            cnt += cnt_delta
            zcnt_delta += r.varbit_int()
            zcnt += zcnt_delta
            sum_bits = s.read(r)
            if sum_bits == STALE_NAN_BITS:
                out.append(_sample(layout, t, cnt, zcnt, sum_bits, buckets, npos))
                continue
            for i in range(len(buckets)):
                deltas[i] += r.varbit_int()
                buckets[i] += deltas[i]
            out.append(_sample(layout, t, cnt, zcnt, sum_bits, buckets, npos))
        return header, out
    states = [XorState(r.bits(64)) for _ in range(3 + npos + nneg)]  # count, zero count, sum, buckets
    t_delta = 0
    out.append(_sample(layout, t, states[0].bits, states[1].bits, states[2].bits,
                       [from_bits(x.bits) for x in states[3:]], npos))
    for _ in range(n - 1):
        t_delta += r.varbit_int()
        t += t_delta
        for x in states[:3]:
            x.read(r)
        if states[2].bits != STALE_NAN_BITS:
            for x in states[3:]:
                x.read(r)
        out.append(_sample(layout, t, states[0].bits, states[1].bits, states[2].bits,
                           [from_bits(x.bits) for x in states[3:]], npos))
    return header, out


def _sample(layout: dict, t: int, cnt, zcnt, sum_bits: int, buckets: list, npos: int) -> dict:
    return {"t": t, "count": cnt, "zero_count": zcnt, "sum_bits": sum_bits, **layout,
            "pos": list(buckets[:npos]), "neg": list(buckets[npos:])}
