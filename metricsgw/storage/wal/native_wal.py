"""The WAL record of a write with native histograms or exemplars ("N1").

    N1 | u32 length of the float record | the float record (A3, walcodec.py) | zstd(native section)
    native section: u32 histograms, u32 exemplars,
                    hist sid i64[], hist t i64[], blob lengths u32[], blobs,
                    ex sid i64[], ex t i64[], ex v f64[], label lengths u32[], labels

A write without them is written as the plain A3 record, so float-only WALs are unchanged; the
float part keeps its segment state (refs, XOR) because it is encoded by the same segment encoder
in the same order. Histogram blobs and exemplar values are stored as their exact bytes.
"""

from __future__ import annotations

import struct

import numpy as np
import zstandard

from ..batch import AppendBatch, NativeSamples
from .walcodec import SegmentDecoder, SegmentEncoder

MAGIC = b"N1"
_U32 = struct.Struct("<I")
_COUNTS = struct.Struct("<II")


def _pack_blobs(blobs: list[bytes]) -> list[bytes]:
    return [np.fromiter(map(len, blobs), np.uint32, len(blobs)).tobytes(), b"".join(blobs)]


def _unpack_blobs(buf: bytes, pos: int, n: int) -> tuple[list[bytes], int]:
    lens = np.frombuffer(buf, np.uint32, n, pos).astype(np.int64)
    pos += 4 * n
    ends = (np.cumsum(lens) + pos).tolist()
    starts = [pos] + ends[:-1]
    return [buf[a:b] for a, b in zip(starts, ends)], (ends[-1] if n else pos)


def encode_native(nat: NativeSamples) -> bytes:
    nh, ne = nat.histograms, nat.exemplars
    return b"".join([_COUNTS.pack(nh, ne),
                     np.ascontiguousarray(nat.hist_sid, np.int64).tobytes(),
                     np.ascontiguousarray(nat.hist_t, np.int64).tobytes(), *_pack_blobs(nat.hist_blob),
                     np.ascontiguousarray(nat.ex_sid, np.int64).tobytes(),
                     np.ascontiguousarray(nat.ex_t, np.int64).tobytes(),
                     np.ascontiguousarray(nat.ex_v, np.float64).tobytes(), *_pack_blobs(nat.ex_labels)])


def decode_native(buf: bytes) -> NativeSamples:
    nh, ne = _COUNTS.unpack_from(buf, 0)
    pos = _COUNTS.size
    hist_sid = np.frombuffer(buf, np.int64, nh, pos)
    hist_t = np.frombuffer(buf, np.int64, nh, pos + 8 * nh)
    blobs, pos = _unpack_blobs(buf, pos + 16 * nh, nh)
    ex_sid = np.frombuffer(buf, np.int64, ne, pos)
    ex_t = np.frombuffer(buf, np.int64, ne, pos + 8 * ne)
    ex_v = np.frombuffer(buf, np.float64, ne, pos + 16 * ne)
    labels, _ = _unpack_blobs(buf, pos + 24 * ne, ne)
    return NativeSamples(hist_sid, hist_t, blobs, ex_sid, ex_t, ex_v, labels)


class NativeSegmentEncoder(SegmentEncoder):
    def __init__(self) -> None:
        super().__init__()
        self._native_zstd = zstandard.ZstdCompressor(level=1)

    def encode(self, batch: AppendBatch) -> bytes:
        floats = super().encode(batch)
        if not batch.native:
            return floats
        return b"".join([MAGIC, _U32.pack(len(floats)), floats,
                         self._native_zstd.compress(encode_native(batch.native))])


class NativeSegmentDecoder(SegmentDecoder):
    def __init__(self) -> None:
        super().__init__()
        self._native_zstd = zstandard.ZstdDecompressor()

    def decode_raw(self, payload: bytes) -> tuple[AppendBatch, np.ndarray, list[bytes]]:
        if payload[:2] != MAGIC:
            return super().decode_raw(payload)
        (n,) = _U32.unpack_from(payload, 2)
        batch, sids, keys = super().decode_raw(payload[6:6 + n])
        batch.native = decode_native(self._native_zstd.decompress(payload[6 + n:]))
        return batch, sids, keys
