"""A label column's distinct values as bytes (a checkpoint's) and as an Arrow binary array (a loaded column's until
something reads them as Python strings).

A value is held as the bytes of its series key: ``str`` decoded with surrogateescape (model.series_key), so any
value a series key can hold round-trips, even bytes that are not UTF-8. The packed form is one zstd frame of
``count (u32) | offsets (i32 x count+1) | data``: an Arrow binary array's own buffers. Why Arrow and not JSON: a
restart that registers the series its checkpoint lacks needs the codes of their values in columns of millions of
values; as Python strings that was parsing every such column and building a dict of it (1 s at 2.7M series in
each process), as Arrow it is ``index_in`` in C++ over the buffers as they come out of zstd.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

_COUNT = struct.Struct("<I")
ZSTD_LEVEL = 3


def encode(values: list[str]) -> pa.BinaryArray:
    """Python strings -> their key bytes."""
    try:  # nearly always valid UTF-8: Arrow encodes in C
        return pa.array(values, pa.utf8()).cast(pa.binary())
    except (UnicodeEncodeError, pa.ArrowException):
        return pa.array([v.encode("utf-8", "surrogateescape") for v in values], pa.binary())


def decode(arr: pa.BinaryArray) -> list[str]:
    """Key bytes -> Python strings (bytes that are not UTF-8 as surrogateescape does)."""
    try:  # nearly always valid UTF-8: Arrow validates and decodes in C
        return arr.cast(pa.utf8()).to_pylist()
    except pa.ArrowInvalid:
        return [b.decode("utf-8", "surrogateescape") for b in arr.to_pylist()]


def pack(arr: pa.BinaryArray) -> bytes:
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = arr.buffers()[2]
    body = memoryview(data)[lo:hi] if data is not None else b""
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(
        b"".join((_COUNT.pack(len(arr)), (offsets - lo).astype("<i4").tobytes(), body)))


def pack_list(values: list[str]) -> bytes:
    return pack(encode(values))


def unpack(packed: bytes) -> pa.BinaryArray:
    raw = zstandard.ZstdDecompressor().decompress(packed)
    (n,) = _COUNT.unpack_from(raw)
    end = _COUNT.size + 4 * (n + 1)
    offsets = np.frombuffer(raw, "<i4", n + 1, _COUNT.size)
    if offsets[0] != 0 or len(raw) - end != int(offsets[-1]) or (np.diff(offsets) < 0).any():
        raise ValueError("packed label values: offsets do not fit the data")
    buf = pa.py_buffer(raw)
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, buf.slice(_COUNT.size, 4 * (n + 1)), buf.slice(end)])


def positions(wanted: pa.BinaryArray, held: pa.BinaryArray) -> np.ndarray:
    """For distinct ``wanted`` values, each one's position in ``held`` (distinct too), -1 where it is not there.
    The few wanted are hashed and every held value probed: a column's values are never made Python strings."""
    at = pc.index_in(held, value_set=wanted)  # per held value: its position among the wanted, or null
    hit = np.flatnonzero(at.is_valid().to_numpy(zero_copy_only=False))
    out = np.full(len(wanted), -1, np.int64)
    out[at.filter(at.is_valid()).to_numpy()] = hit
    return out
