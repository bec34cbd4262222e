"""The WAL record of one acknowledged append: new series, metadata and samples, bit-exact."""

from __future__ import annotations

import json
import struct

import numpy as np

from .batch import AppendBatch, MetricMetadata

_MAGIC = b"A1"
_U32 = struct.Struct("<I")


def encode(batch: AppendBatch) -> bytes:
    # json encodes (sid, ((name, value), ...)) tuples as nested arrays in C: no per-label Python work.
    series = json.dumps(batch.new_series, separators=(",", ":")).encode() if batch.new_series else b""
    meta = json.dumps([(m.metric, m.type, m.help, m.unit) for m in batch.metadata],
                      separators=(",", ":")).encode() if batch.metadata else b""
    n = len(batch.sid)
    return b"".join([
        _MAGIC, _U32.pack(len(series)), series, _U32.pack(len(meta)), meta, _U32.pack(n),
        np.ascontiguousarray(batch.sid, np.int64).tobytes(),
        np.ascontiguousarray(batch.t, np.int64).tobytes(),
        np.ascontiguousarray(batch.v, np.float64).tobytes(),
    ])


def decode(payload: bytes) -> AppendBatch:
    if payload[:2] != _MAGIC:
        raise ValueError("unknown WAL record type")
    pos = 2
    (slen,) = _U32.unpack_from(payload, pos)
    pos += 4
    series = json.loads(payload[pos:pos + slen]) if slen else []
    pos += slen
    (mlen,) = _U32.unpack_from(payload, pos)
    pos += 4
    meta = json.loads(payload[pos:pos + mlen]) if mlen else []
    pos += mlen
    (n,) = _U32.unpack_from(payload, pos)
    pos += 4
    sid = np.frombuffer(payload, np.int64, n, pos)
    t = np.frombuffer(payload, np.int64, n, pos + 8 * n)
    v = np.frombuffer(payload, np.float64, n, pos + 16 * n)
    return AppendBatch(
        new_series=[(int(s), tuple((a, b) for a, b in lb)) for s, lb in series],
        sid=sid, t=t, v=v,
        metadata=[MetricMetadata(*m) for m in meta],
    )
