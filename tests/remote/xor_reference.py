"""An XOR chunk decoder written from the format description (tsdb/docs/format/chunks.md and the
Gorilla paper as Prometheus adapts it), independent of metricsgw/remote/xor.py: the tests use it
to read back what the encoder wrote and what Prometheus sent, and a reader of the streamed
remote-read framing (uvarint size, big-endian CRC32C, message)."""

from __future__ import annotations

import struct

import crc32c


class BitReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0  # in bits

    def bit(self) -> int:
        byte = self.data[self.pos >> 3]
        b = (byte >> (7 - (self.pos & 7))) & 1
        self.pos += 1
        return b

    def bits(self, n: int) -> int:
        out = 0
        for _ in range(n):
            out = (out << 1) | self.bit()
        return out

    def byte(self) -> int:
        return self.bits(8)

    def uvarint(self) -> int:
        out, shift = 0, 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if b < 0x80:
                return out
            shift += 7

    def varint(self) -> int:
        u = self.uvarint()
        return (u >> 1) ^ -(u & 1)


def _signed(x: int, n: int) -> int:
    """A dod field of n bits: values above 2^(n-1) are negative (bitRange allows +2^(n-1))."""
    return x - (1 << n) if x > (1 << (n - 1)) else x


def decode_xor(chunk: bytes) -> list[tuple[int, int]]:
    """[(t_ms, value bits as uint64), ...] of one XOR chunk."""
    (n,) = struct.unpack(">H", chunk[:2])
    r = BitReader(chunk[2:])
    out: list[tuple[int, int]] = []
    t = v = delta = 0
    leading = trailing = 0
    for i in range(n):
        if i == 0:
            t = r.varint()
            v = r.bits(64)
            out.append((t, v))
            continue
        if i == 1:
            delta = r.uvarint()
        else:
            prefix = 0
            for _ in range(4):  # 0, 10, 110, 1110, 1111
                b = r.bit()
                prefix = (prefix << 1) | b
                if not b:
                    break
            width = {0b0: 0, 0b10: 14, 0b110: 17, 0b1110: 20, 0b1111: 64}[prefix]
            if width == 64:
                dod = r.bits(64)
                dod = dod - (1 << 64) if dod >= 1 << 63 else dod
            elif width:
                dod = _signed(r.bits(width), width)
            else:
                dod = 0
            delta += dod
        t += delta
        if r.bit():  # value changed
            if r.bit():  # new leading/trailing window
                leading = r.bits(5)
                sig = r.bits(6) or 64
                trailing = 64 - leading - sig
            sig = 64 - leading - trailing
            v ^= r.bits(sig) << trailing
        out.append((t, v))
    return out


def read_frames(body: bytes) -> list[bytes]:
    """The messages of a STREAMED_XOR_CHUNKS body; raises on a bad size or checksum."""
    frames, pos = [], 0
    while pos < len(body):
        size, shift = 0, 0
        while True:
            b = body[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        (crc,) = struct.unpack(">I", body[pos:pos + 4])
        pos += 4
        msg = body[pos:pos + size]
        if len(msg) != size:
            raise ValueError("truncated frame")
        if crc32c.crc32c(msg) != crc:
            raise ValueError("frame checksum mismatch")
        frames.append(msg)
        pos += size
    return frames
