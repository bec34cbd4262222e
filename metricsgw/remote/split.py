"""Split a remote-write request by series over N ingest shards (pure: bytes in, bytes out).

A series goes to shard ``crc32(its raw label bytes) % N``: stable across processes and restarts
(not Python's salted ``hash``), and the same bytes the shard's ingest pipeline keys its series cache
by. Each part is a valid request of the same protocol, holding the selected TimeSeries records
byte for byte as sent, so the shard's own validation, relabelling and limits judge them exactly as
they would the whole request:
- 1.0: the selected ``timeseries`` records, then every ``metadata`` record (metadata is per metric
  family, whose series sit on every shard); a request without series sends its metadata to all.
- 2.0: the whole ``symbols`` table, then the selected ``timeseries`` records (their label refs stay
  valid; a shard ignores the symbols it does not use).
The usual layout (series records contiguous, as Go's and Python's protobuf encoders write them) is
cut with numpy gathers; any other valid layout is re-framed record by record.
"""

from __future__ import annotations

import zlib

import numpy as np
from google.protobuf.message import DecodeError

from ..errors import BadData
from .codec import uvarint
from .fastscan import scan_series, varints
from .proto import remote_v1_pb2 as v1pb
from .proto import remote_v2_pb2 as v2pb

V1_SERIES_TAG, V1_METADATA_TAG = 0x0A, 0x1A  # WriteRequest: timeseries = 1, metadata = 3
V2_SYMBOL_TAG, V2_SERIES_TAG = 0x22, 0x2A  # Request: symbols = 4, timeseries = 5


def shard_of_keys(keys: list[bytes], shards: int) -> np.ndarray:
    """The shard of each series, from its raw label bytes."""
    crc = zlib.crc32
    return np.fromiter((crc(k) for k in keys), np.int64, len(keys)) % shards


def split_v1(raw: bytes, shards: int) -> list[bytes]:
    """A decompressed 1.0 WriteRequest -> one decompressed body per shard (b"" = nothing for it)."""
    try:
        req = v1pb.BlobWriteRequest.FromString(raw)
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 1.0 protobuf: {err}") from None
    blobs = list(req.timeseries)
    metadata = [m.SerializeToString() for m in req.metadata]
    tail = b"".join(_frame(V1_METADATA_TAG, m) for m in metadata)
    if not blobs:
        return [tail] * shards if tail else [b""] * shards
    scanned = scan_series(blobs)
    keys = scanned.keys if scanned is not None else [_v1_label_key(b) for b in blobs]
    return _assemble(raw, V1_SERIES_TAG, blobs, shard_of_keys(keys, shards), shards, head=b"", tail=tail,
                     series_first=True)


def split_v2(raw: bytes, shards: int) -> list[bytes]:
    """A decompressed 2.0 Request -> one decompressed body per shard (b"" = nothing for it)."""
    try:
        req = v2pb.RawRequest.FromString(raw)
        blobs_req = v2pb.BlobRequest.FromString(raw)
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 2.0 protobuf: {err}") from None
    symbols = list(req.symbols)
    blobs = list(blobs_req.timeseries)
    head = b"".join(_frame(V2_SYMBOL_TAG, s) for s in symbols)
    if not blobs:
        return [b""] * shards
    lookup = symbols.__getitem__
    keys = []
    for ts in req.timeseries:  # 2.0 names labels by refs: the key is the symbols they point at
        try:
            keys.append(b"\xff".join(map(lookup, ts.labels_refs)))
        except IndexError:
            keys.append(b"")  # the shard refuses it with the reason; any shard will do
    return _assemble(raw, V2_SERIES_TAG, blobs, shard_of_keys(keys, shards), shards, head=head, tail=b"",
                     series_first=False)


def _v1_label_key(blob: bytes) -> bytes:
    try:
        labels = v1pb.RawTimeSeries.FromString(blob).labels
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 1.0 protobuf: {err}") from None
    return b"".join(_frame(V1_SERIES_TAG, lb) for lb in labels)


def _frame(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + uvarint(len(payload)) + payload


def _assemble(raw: bytes, tag: int, blobs: list[bytes], shard: np.ndarray, shards: int, head: bytes, tail: bytes,
              series_first: bool) -> list[bytes]:
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    rec_len = 1 + _varint_size(lengths) + lengths
    total = int(rec_len.sum())
    base = 0 if series_first else len(raw) - total
    starts = base + np.cumsum(rec_len) - rec_len
    if not _records_at(raw, tag, starts, lengths, base, total, series_first, len(head) + len(tail)):
        return _reframe(tag, blobs, shard, shards, head, tail)
    buf = np.frombuffer(raw, np.uint8)
    parts = []
    for s in range(shards):
        pick = np.flatnonzero(shard == s)
        if not len(pick):
            parts.append(b"")
            continue
        lens = rec_len[pick]
        offsets = np.cumsum(lens) - lens
        idx = np.repeat(starts[pick] - offsets, lens) + np.arange(int(lens.sum()))
        parts.append(head + buf[idx].tobytes() + tail)
    return parts


def _records_at(raw: bytes, tag: int, starts: np.ndarray, lengths: np.ndarray, base: int, total: int,
                series_first: bool, others: int) -> bool:
    """Are the series records exactly at ``starts`` (contiguous, first or last in the message)?"""
    if base < 0 or len(raw) - total != others:
        return False
    buf = np.frombuffer(raw + bytes(10), np.uint8)
    if (buf[starts] != tag).any():
        return False
    decoded = varints(buf, starts + 1, 10)
    return decoded is not None and bool((decoded[0].astype(np.int64) == lengths).all())


def _reframe(tag: int, blobs: list[bytes], shard: np.ndarray, shards: int, head: bytes, tail: bytes) -> list[bytes]:
    groups: list[list[bytes]] = [[] for _ in range(shards)]
    for s, blob in zip(shard.tolist(), blobs):
        groups[s].append(_frame(tag, blob))
    return [head + b"".join(g) + tail if g else b"" for g in groups]


def _varint_size(n: np.ndarray) -> np.ndarray:
    size = np.ones(len(n), np.int64)
    for bits in (7, 14, 21, 28, 35, 42, 49, 56, 63):
        size += n >= (1 << bits)
    return size
