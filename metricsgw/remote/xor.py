"""Prometheus's XOR chunk encoding (tsdb/chunkenc/xor.go, Gorilla-style), bit for bit.

A chunk is a big-endian uint16 sample count followed by a bit stream: the first sample as a
varint timestamp and the 64 raw bits of its value; the second as a uvarint time delta and an
XOR-encoded value; every later one as a delta-of-delta timestamp in one of five bit widths and
an XOR-encoded value that reuses the previous leading/trailing zero counts when it can.

Bit-exact also in one quirk of Prometheus's bit stream: a byte-wise write that ends on a byte
boundary leaves an empty byte appended, so such a chunk ends in one zero byte more than its
bits need (tests/remote/test_xor.py checks this against chunks Prometheus itself produced).

Pure: numpy arrays in, bytes out. Values are taken by bit pattern (stale NaN stays stale NaN).
"""

from __future__ import annotations

import struct
from typing import Iterator

import numpy as np

# Prometheus's head cuts a chunk at 120 samples (storage/remote reads stream its chunks as they are).
SAMPLES_PER_CHUNK = 120
ENCODING_XOR = 1
_U64 = (1 << 64) - 1


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint(n: int) -> bytes:
    """Go's binary.PutVarint: zig-zag, then uvarint."""
    return _uvarint(((n << 1) ^ (n >> 63)) & _U64)


class _Bits:
    """Bits accumulated MSB-first in one int; ``byte_write`` tracks the empty-byte quirk."""

    __slots__ = ("acc", "n", "byte_write")

    def __init__(self) -> None:
        self.acc = 0
        self.n = 0
        self.byte_write = False  # was the last primitive write a whole byte (Go's writeByte)?

    def bits(self, value: int, nbits: int) -> None:
        """Go's writeBits: the ``nbits`` right-most bits of value; whole bytes first, then bit by bit."""
        self.acc = (self.acc << nbits) | (value & ((1 << nbits) - 1))
        self.n += nbits
        self.byte_write = nbits % 8 == 0

    def raw_bytes(self, data: bytes) -> None:
        for b in data:
            self.bits(b, 8)

    def to_bytes(self) -> bytes:
        nbytes = (self.n + 7) // 8
        out = (self.acc << (nbytes * 8 - self.n)).to_bytes(nbytes, "big")
        if self.n % 8 == 0 and self.byte_write and self.n:
            out += b"\x00"  # bstream.writeByte appends the next (empty) byte eagerly
        return out


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bit length of each uint64, exactly (float64 holds every 32-bit half exactly)."""
    hi = (x >> np.uint64(32)).astype(np.float64)
    lo = (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return np.where(hi > 0, 32 + np.frexp(hi)[1], np.frexp(lo)[1]).astype(np.int64)


def _time_fields(t: list[int]) -> list[tuple[int, int]]:
    """(bits, width) of each sample's timestamp field from the third on: the delta-of-delta in the
    narrowest of Prometheus's classes (0 | 10+14 | 110+17 | 1110+20 | 1111+64 bits)."""
    out = []
    prev_delta = t[1] - t[0]
    for i in range(2, len(t)):
        delta = t[i] - t[i - 1]
        dod = delta - prev_delta
        prev_delta = delta
        if dod == 0:
            out.append((0, 1))
        elif -8191 <= dod <= 8192:
            out.append(((0b10 << 14) | (dod & 0x3FFF), 16))
        elif -65535 <= dod <= 65536:
            out.append(((0b110 << 17) | (dod & 0x1FFFF), 20))
        elif -524287 <= dod <= 524288:
            out.append(((0b1110 << 20) | (dod & 0xFFFFF), 24))
        else:
            out.append(((0b1111 << 64) | (dod & _U64), 68))
    return out


def encode_chunk(t: np.ndarray, v: np.ndarray) -> bytes:
    """One XOR chunk of samples t (int64 ms, strictly increasing) and v (float64); at most 65535.

    Timestamp fields and the XOR of each value with the one before (with its leading and trailing
    zero counts) are found for all samples at once; one loop then makes the sequential choices
    (reuse the previous leading/trailing window or open a new one) and appends the bits."""
    n = len(t)
    if n > 0xFFFF:
        raise ValueError(f"an XOR chunk holds at most 65535 samples, got {n}")
    if n == 0:
        return b"\x00\x00"
    ts = np.asarray(t, np.int64)
    vbits = np.ascontiguousarray(v, np.float64).view(np.uint64)
    out = _Bits()
    done: list[bytes] = []  # whole bytes already written
    out.raw_bytes(_varint(int(ts[0])))
    out.bits(int(vbits[0]), 64)
    if n > 1:
        xors = vbits[1:] ^ vbits[:-1]
        lowest = xors & (~xors + np.uint64(1))  # the lowest set bit alone
        lead = np.minimum(64 - _bit_length(xors), 31).tolist()  # 5 bits hold at most 31
        trail = (_bit_length(lowest) - 1).tolist()
        xors = xors.tolist()
        tlist = ts.tolist()
        time_fields = _time_fields(tlist)
        out.raw_bytes(_uvarint((tlist[1] - tlist[0]) & _U64))
        acc, nbits, byte_write = out.acc, out.n, out.byte_write
        leading, trailing = 0xFF, 0
        for i in range(n - 1):
            if i:
                bits, width = time_fields[i - 1]
                acc = (acc << width) | bits
                nbits += width
                byte_write = width == 68
            delta = xors[i]
            if delta == 0:
                acc <<= 1
                nbits += 1
                byte_write = False
                continue
            new_leading, new_trailing = lead[i], trail[i]
            if leading != 0xFF and new_leading >= leading and new_trailing >= trailing:
                width = 64 - leading - trailing  # "10": the previous window holds the change
                acc = (((acc << 2) | 0b10) << width) | (delta >> trailing)
                nbits += 2 + width
            else:
                leading, trailing = new_leading, new_trailing
                width = 64 - leading - trailing  # "11", 5 bits leading, 6 bits width (64 as 0), the bits
                acc = (((((acc << 2) | 0b11) << 11) | (leading << 6) | (width & 0x3F)) << width) | (delta >> trailing)
                nbits += 13 + width
            byte_write = width % 8 == 0
            if nbits >= 256:  # move whole bytes out, so the shifts above stay on small ints
                keep = nbits & 7
                done.append((acc >> keep).to_bytes((nbits - keep) >> 3, "big"))
                acc &= (1 << keep) - 1
                nbits = keep
        out.acc, out.n, out.byte_write = acc, nbits, byte_write
    return struct.pack(">H", n) + b"".join(done) + out.to_bytes()


def chunks(t: np.ndarray, v: np.ndarray, per_chunk: int = SAMPLES_PER_CHUNK) -> Iterator[tuple[int, int, bytes]]:
    """(min_time_ms, max_time_ms, XOR chunk bytes) for consecutive runs of ``per_chunk`` samples."""
    for a in range(0, len(t), per_chunk):
        b = min(a + per_chunk, len(t))
        yield int(t[a]), int(t[b - 1]), encode_chunk(t[a:b], v[a:b])
