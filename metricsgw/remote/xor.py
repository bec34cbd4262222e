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


def _leading_zeros(x: int) -> int:
    return 64 - x.bit_length()


def _trailing_zeros(x: int) -> int:
    return (x & -x).bit_length() - 1


class _Bits:
    """Bits accumulated MSB-first in one int; ``ends_on_byte_write`` tracks the empty-byte quirk."""

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


def _bit_range(x: int, nbits: int) -> bool:
    return -((1 << (nbits - 1)) - 1) <= x <= 1 << (nbits - 1)


def encode_chunk(t: np.ndarray, v: np.ndarray) -> bytes:
    """One XOR chunk of samples t (int64 ms, strictly increasing) and v (float64); at most 65535."""
    n = len(t)
    if n > 0xFFFF:
        raise ValueError(f"an XOR chunk holds at most 65535 samples, got {n}")
    ts = np.asarray(t, np.int64).tolist()
    vbits = np.ascontiguousarray(v, np.float64).view(np.uint64).tolist()
    out = _Bits()
    prev_t = prev_v = t_delta = 0
    leading, trailing = 0xFF, 0
    for i in range(n):
        cur_t, cur_v = ts[i], vbits[i]
        if i == 0:
            out.raw_bytes(_varint(cur_t))
            out.bits(cur_v, 64)
        else:
            delta_t = cur_t - prev_t
            if i == 1:
                out.raw_bytes(_uvarint(delta_t & _U64))
            else:
                dod = delta_t - t_delta
                if dod == 0:
                    out.bits(0, 1)
                elif _bit_range(dod, 14):
                    out.bits(0b10, 2)
                    out.bits(dod, 14)
                elif _bit_range(dod, 17):
                    out.bits(0b110, 3)
                    out.bits(dod, 17)
                elif _bit_range(dod, 20):
                    out.bits(0b1110, 4)
                    out.bits(dod, 20)
                else:
                    out.bits(0b1111, 4)
                    out.bits(dod, 64)
            t_delta = delta_t
            # xorWrite
            delta = cur_v ^ prev_v
            if delta == 0:
                out.bits(0, 1)
            else:
                out.bits(1, 1)
                new_leading = min(_leading_zeros(delta), 31)  # 5 bits hold at most 31
                new_trailing = _trailing_zeros(delta)
                if leading != 0xFF and new_leading >= leading and new_trailing >= trailing:
                    out.bits(0, 1)
                    out.bits(delta >> trailing, 64 - leading - trailing)
                else:
                    leading, trailing = new_leading, new_trailing
                    sigbits = 64 - new_leading - new_trailing
                    out.bits(1, 1)
                    out.bits(new_leading, 5)
                    out.bits(sigbits, 6)  # 64 does not fit: written as 0, read back as 64
                    out.bits(delta >> new_trailing, sigbits)
        prev_t, prev_v = cur_t, cur_v
    return struct.pack(">H", n) + out.to_bytes()


def chunks(t: np.ndarray, v: np.ndarray, per_chunk: int = SAMPLES_PER_CHUNK) -> Iterator[tuple[int, int, bytes]]:
    """(min_time_ms, max_time_ms, XOR chunk bytes) for consecutive runs of ``per_chunk`` samples."""
    for a in range(0, len(t), per_chunk):
        b = min(a + per_chunk, len(t))
        yield int(t[a]), int(t[b - 1]), encode_chunk(t[a:b], v[a:b])
