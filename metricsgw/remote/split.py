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
_PAD = bytes(16)
_MAX_LABELS = 1024  # label fields walked per series at most (the ingest limit is 40 by default)


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
    tail = b"".join(_frame(V1_METADATA_TAG, m.SerializeToString()) for m in req.metadata)
    if not blobs:
        return [tail] * shards if tail else [b""] * shards
    recs = _Records.locate(raw, V1_SERIES_TAG, blobs, series_first=True, others=len(tail))
    keys = recs.v1_label_keys(raw) if recs is not None else None
    if keys is None:
        scanned = scan_series(blobs)
        keys = scanned.keys if scanned is not None else [_v1_label_key(b) for b in blobs]
    shard = shard_of_keys(keys, shards)
    if recs is None:
        return _reframe(V1_SERIES_TAG, blobs, shard, shards, b"", tail)
    return recs.cut(raw, shard, shards, b"", tail)


def split_v2(raw: bytes, shards: int) -> list[bytes]:
    """A decompressed 2.0 Request -> one decompressed body per shard (b"" = nothing for it)."""
    try:
        req = v2pb.RawRequest.FromString(raw)
        blobs = list(v2pb.BlobRequest.FromString(raw).timeseries)
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 2.0 protobuf: {err}") from None
    symbols = list(req.symbols)
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
    shard = shard_of_keys(keys, shards)
    recs = _Records.locate(raw, V2_SERIES_TAG, blobs, series_first=False, others=len(head))
    if recs is None:
        return _reframe(V2_SERIES_TAG, blobs, shard, shards, head, b"")
    return recs.cut(raw, shard, shards, head, b"")


class _Records:
    """Where the series records sit in the message, when they are contiguous and first (1.0: metadata after
    them) or last (2.0: symbols before them), as every encoder we know writes them."""

    def __init__(self, base: int, rec_len: np.ndarray, body_start: np.ndarray, lengths: np.ndarray) -> None:
        self.base, self.rec_len, self.body_start, self.lengths = base, rec_len, body_start, lengths

    @classmethod
    def locate(cls, raw: bytes, tag: int, blobs: list[bytes], series_first: bool, others: int) -> "_Records | None":
        """None when the records are laid out otherwise (the caller re-frames them one by one)."""
        lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
        prefix = 1 + _varint_size(lengths)
        rec_len = prefix + lengths
        if len(raw) - int(rec_len.sum()) != others:
            return None
        base = 0 if series_first else others
        starts = base + np.cumsum(rec_len) - rec_len
        buf = np.frombuffer(raw + _PAD, np.uint8)
        if (buf[starts] != tag).any():
            return None
        decoded = varints(buf, starts + 1, 10)
        if decoded is None or not (decoded[0].astype(np.int64) == lengths).all():
            return None
        return cls(base, rec_len, starts + prefix, lengths)

    def v1_label_keys(self, raw: bytes) -> list | None:
        """Each series' label records (its leading field-1 entries) as memoryview slices of ``raw``: the bytes
        fastscan keys series by. None when some series' fields are laid out otherwise."""
        buf = np.frombuffer(raw + _PAD, np.uint8)
        end = self.body_start + self.lengths
        pos = self.body_start.copy()
        active = np.flatnonzero(pos < end)
        for _ in range(_MAX_LABELS):  # step k reads the k-th label of every series at once
            if not len(active):
                break
            p = pos[active]
            is_label = buf[p] == V1_SERIES_TAG  # TimeSeries.labels is field 1 too: the same tag byte
            active, p = active[is_label], p[is_label]
            if not len(active):
                break
            decoded = varints(buf, p + 1, 5)
            if decoded is None:
                return None
            nxt = p + 1 + decoded[1] + decoded[0].astype(np.int64)
            if (nxt > end[active]).any():
                return None
            pos[active] = nxt
            active = active[nxt < end[active]]
        else:
            return None
        view = memoryview(raw)
        return [view[a:b] for a, b in zip(self.body_start.tolist(), pos.tolist())]

    def cut(self, raw: bytes, shard: np.ndarray, shards: int, head: bytes, tail: bytes) -> list[bytes]:
        """Each shard's records in their order, between ``head`` and ``tail``: one byte mask per shard."""
        region = np.frombuffer(raw, np.uint8, int(self.rec_len.sum()), self.base)
        byte_shard = np.repeat(shard.astype(np.uint16), self.rec_len)
        present = np.bincount(shard, minlength=shards) > 0
        return [head + region[byte_shard == s].tobytes() + tail if present[s] else b"" for s in range(shards)]


def _v1_label_key(blob: bytes) -> bytes:
    try:
        labels = v1pb.RawTimeSeries.FromString(blob).labels
    except DecodeError as err:
        raise BadData(f"cannot decode remote-write 1.0 protobuf: {err}") from None
    return b"".join(_frame(V1_SERIES_TAG, lb) for lb in labels)


def _frame(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + uvarint(len(payload)) + payload


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
