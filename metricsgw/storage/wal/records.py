"""The WAL records of earlier versions, still replayed so a data dir written before an upgrade opens.

Record "A2": new series as int64 ids + u32 key lengths + the concatenated ``model.series_key``
bytes (split back with two str.split calls), then metadata (JSON), then the raw sample columns
(24 bytes a sample). "A1" (the first version): new series as JSON. Records are written as "A3"
now (walcodec.py), which reuses the series-key layout below; ``encode`` stays to write A2
records in the tests that prove old WALs replay.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from ...model import MetricMetadata, labels_from_key, series_keys
from ..batch import AppendBatch

_MAGIC_V1 = b"A1"
_MAGIC = b"A2"
_U32 = struct.Struct("<I")


def encode(batch: AppendBatch) -> bytes:
    ns = len(batch.new_series)
    parts = [_MAGIC, _U32.pack(ns)]
    if ns:
        keys = batch.series_keys
        if keys is None or len(keys) != ns:
            keys = series_keys([labels for _, labels in batch.new_series])
        parts += [np.fromiter((sid for sid, _ in batch.new_series), np.int64, ns).tobytes(),
                  np.fromiter(map(len, keys), np.uint32, ns).tobytes(), b"".join(keys)]
    meta = json.dumps([(m.metric, m.type, m.help, m.unit) for m in batch.metadata],
                      separators=(",", ":")).encode() if batch.metadata else b""
    n = len(batch.sid)
    parts += [_U32.pack(len(meta)), meta, _U32.pack(n),
              np.ascontiguousarray(batch.sid, np.int64).tobytes(),
              np.ascontiguousarray(batch.t, np.int64).tobytes(),
              np.ascontiguousarray(batch.v, np.float64).tobytes()]
    return b"".join(parts)


def _series_v2(payload: bytes, pos: int) -> tuple[list, int]:
    (ns,) = _U32.unpack_from(payload, pos)
    sids, keys, pos = read_series_keys(payload, pos + 4, ns)
    return list(zip(sids.tolist(), map(labels_from_key, keys))), pos


def read_series_keys(payload: bytes, pos: int, ns: int) -> tuple[np.ndarray, list[bytes], int]:
    """``ns`` new series laid out as int64 ids, u32 key lengths, concatenated keys:
    (sids, keys, position after them)."""
    sids = np.frombuffer(payload, np.int64, ns, pos).copy()
    pos += 8 * ns
    lens = np.frombuffer(payload, np.uint32, ns, pos).astype(np.int64)
    pos += 4 * ns
    ends = (np.cumsum(lens) + pos).tolist()
    starts = [pos] + ends[:-1]
    keys = [payload[a:b] for a, b in zip(starts, ends)]
    return sids, keys, (ends[-1] if ns else pos)


def _series_v1(payload: bytes, pos: int) -> tuple[list, int]:
    (slen,) = _U32.unpack_from(payload, pos)
    pos += 4
    series = json.loads(payload[pos:pos + slen]) if slen else []
    return [(int(s), tuple((a, b) for a, b in lb)) for s, lb in series], pos + slen


def decode(payload: bytes) -> AppendBatch:
    magic = payload[:2]
    if magic == _MAGIC:
        series, pos = _series_v2(payload, 2)
    elif magic == _MAGIC_V1:
        series, pos = _series_v1(payload, 2)
    else:
        raise ValueError("unknown WAL record type")
    (mlen,) = _U32.unpack_from(payload, pos)
    pos += 4
    meta = json.loads(payload[pos:pos + mlen]) if mlen else []
    pos += mlen
    (n,) = _U32.unpack_from(payload, pos)
    pos += 4
    sid = np.frombuffer(payload, np.int64, n, pos)
    t = np.frombuffer(payload, np.int64, n, pos + 8 * n)
    v = np.frombuffer(payload, np.float64, n, pos + 16 * n)
    return AppendBatch(new_series=series, sid=sid, t=t, v=v, metadata=[MetricMetadata(*m) for m in meta])
