"""The compact WAL record ("A3"): series by segment-local refs, values XOR'd, byte-shuffled, zstd.

A remote-write stream repeats the same series scrape after scrape. Within one WAL segment each
series id (a random 64-bit hash: incompressible) is written once and then named by a small
ref (0, 1, 2, ... in order of first use), so the refs of a request are mostly +1 steps.
Timestamps are stored as differences (a scrape shares one time: zeros), values XOR'd with the
previous value of the same series in the segment (slowly changing gauges and counters leave
their high bytes zero), and every numeric column is byte-shuffled before zstd (level 1), which
then sees long runs of equal bytes. Measured on the bench workload (100 nodes, 8 scrapes,
2,000-sample requests): 50.9 bytes per sample for the previous record (A2), 13.4 for A2 through
zstd, 5.1 for this one.

The state (refs, last values) belongs to a segment: an encoder is created when a segment is
opened and a decoder when one is replayed, so every segment replays on its own and deleting
flushed segments never orphans a ref. A write that fails abandons its segment (wal.py), so
the encoder never has to undo state for records that did not reach the disk.
Records of older versions (A1, A2) carry no state and still replay.
"""

from __future__ import annotations

import functools
import json
import struct

import numpy as np
import zstandard

from ... import npsort
from ...model import MetricMetadata, labels_from_key, series_keys
from ..batch import AppendBatch
from ..catalog.sorted_search import search_sorted
from . import records

MAGIC = b"A3"
_HEADER = struct.Struct("<BIIII")  # flags, new refs, new series, metadata bytes, samples
_XOR = 1  # flag: values are XOR'd with the segment's previous value of the same series
ZSTD_LEVEL = 1
_U64 = np.dtype("<u8")
_I64 = np.dtype("<i8")


def _shuffle(a: np.ndarray) -> bytes:
    """Byte planes: every element's byte 0, then every byte 1, ... (Parquet's BYTE_STREAM_SPLIT)."""
    return a.view(np.uint8).reshape(-1, a.dtype.itemsize).T.tobytes()


def _deltas(a: np.ndarray) -> np.ndarray:
    """``np.diff(a, prepend=0)`` without its general-case overhead (a few µs a call, twice a record)."""
    d = np.empty_like(a)
    d[:1] = a[:1]
    np.subtract(a[1:], a[:-1], out=d[1:])
    return d


def _unshuffle(buf: bytes, pos: int, n: int, dtype: np.dtype) -> np.ndarray:
    size = dtype.itemsize
    planes = np.frombuffer(buf, np.uint8, n * size, pos).reshape(size, n)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(n)


class _Column:
    """A growable numpy array (amortised doubling); spare capacity holds ``fill``."""

    def __init__(self, dtype, fill=0) -> None:
        self.fill = fill
        self.a = np.full(1024, fill, dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        self.pad_to(need)
        self.a[need - len(values): need] = values

    def pad_to(self, need: int) -> None:
        """At least ``need`` elements, the new ones ``fill``."""
        if need > len(self.a):
            grown = np.full(max(need, 2 * len(self.a)), self.fill, self.a.dtype)
            grown[: self.n] = self.a[: self.n]
            self.a = grown
        self.n = max(self.n, need)


class RefTable:
    """sid -> ref for one segment, vectorised: a big sorted index rebuilt now and then, plus a
    small sorted index of recent additions (so a lookup is two binary searches, never a
    Python loop over samples).

    In front of them, when storage says where each series sits in its catalog (``rows``, dense indexes
    numbered anew only when retention rebuilds the catalog: ``epoch``), the refs found so far by row: a
    write of known series is then one gather, not two searches of every sid (the searches, and the sort
    of the sids they start with, were most of a record's encoding, and the WAL thread holds the GIL for
    them while the event loop waits)."""

    def __init__(self) -> None:
        empty = np.empty(0, np.int64)
        self._keys, self._refs = empty, empty
        self._new_keys, self._new_refs = empty, empty
        self.count = 0
        self._by_row = _Column(np.int32, fill=-1)  # catalog row -> ref (-1: not looked up yet), of _row_epoch
        self._row_epoch = -1

    def refs_of_rows(self, sids: np.ndarray, rows: np.ndarray, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``refs_of(sids)``, where ``rows[i]`` is sid i's row in the catalog of ``epoch``."""
        if epoch != self._row_epoch:  # a catalog rebuilt since: its rows name other series
            self._by_row, self._row_epoch = _Column(np.int32, fill=-1), epoch
        self._by_row.pad_to(int(rows.max()) + 1 if len(rows) else 0)
        refs = self._by_row.a[rows].astype(np.int64)
        miss = refs < 0
        if not miss.any():
            return refs, sids[:0]
        # Every sid not yet seen by row is looked up (or given a new ref) as refs_of does; refs of the others
        # are older, so the new refs still come in order of first use.
        found, added = self.refs_of(sids[miss])
        refs[miss] = found
        self._by_row.a[rows[miss]] = found
        return refs, added

    @staticmethod
    def _find(keys: np.ndarray, refs: np.ndarray, sids: np.ndarray) -> np.ndarray:
        if not len(keys):
            return np.full(len(sids), -1, np.int64)
        pos = search_sorted(keys, sids)
        return np.where(keys[pos] == sids, refs[pos], -1)

    def refs_of(self, sids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(refs of these sids, the sids that got a new ref, in ref order)."""
        refs = self._find(self._keys, self._refs, sids)
        miss = refs < 0
        if not miss.any():
            return refs, sids[:0]
        refs[miss] = self._find(self._new_keys, self._new_refs, sids[miss])
        miss = refs < 0
        if not miss.any():
            return refs, sids[:0]
        uniq, first = npsort.unique_first(sids[miss])
        added = uniq[np.argsort(first)]  # refs in order of first use: a scrape's refs go up by one
        keys = np.concatenate([self._new_keys, added])
        vals = np.concatenate([self._new_refs, np.arange(self.count, self.count + len(added), dtype=np.int64)])
        self.count += len(added)
        # keys is a sorted run followed by a few new sids: timsort ("stable") merges that in about
        # linear time where the default introsort re-sorts everything (14 ms against 0.65 ms a
        # request with 2.7M series on one shard, bench.scale); the keys are unique, so the order is the same.
        order = np.argsort(keys, kind="stable")
        self._new_keys, self._new_refs = keys[order], vals[order]
        refs[miss] = self._find(self._new_keys, self._new_refs, sids[miss])
        if len(self._new_keys) > max(1 << 16, len(self._keys) // 8):
            keys = np.concatenate([self._keys, self._new_keys])
            vals = np.concatenate([self._refs, self._new_refs])
            order = np.argsort(keys, kind="stable")  # two sorted runs: merged, not re-sorted
            self._keys, self._refs = keys[order], vals[order]
            self._new_keys = self._new_refs = np.empty(0, np.int64)
        return refs, added


def _has_duplicates(refs: np.ndarray) -> bool:
    if len(refs) < 2:
        return False
    ordered = np.sort(refs)  # a sort of the request's refs: a quarter of np.unique's cost here
    return bool((ordered[1:] == ordered[:-1]).any())


class SegmentEncoder:
    """Encodes the records of one segment, in the order they are written."""

    def __init__(self) -> None:
        self._refs = RefTable()
        self._last = _Column(np.uint64)
        self._zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL)

    def encode(self, batch: AppendBatch) -> bytes:
        sid = np.ascontiguousarray(batch.sid, np.int64)
        n = len(sid)
        if not n and not batch.new_series and not batch.metadata:
            return _empty_record()  # a write of histograms only: its float part leaves the segment's state alone
        return self._encode(batch, sid, n)

    def _encode(self, batch: AppendBatch, sid: np.ndarray, n: int) -> bytes:
        if batch.rows is not None and len(batch.rows) == n:
            refs, added = self._refs.refs_of_rows(sid, batch.rows, batch.rows_epoch)
        else:
            refs, added = self._refs.refs_of(sid)
        self._last.extend(np.zeros(len(added), np.uint64))
        bits = np.ascontiguousarray(batch.v, np.float64).view(np.uint64)
        # A series twice in one record (several scrapes per request) would make "its previous
        # value" depend on the order of a scatter: such records are stored without the XOR.
        flags = 0 if _has_duplicates(refs) else _XOR
        if flags & _XOR:
            values = bits ^ self._last.a[refs]
            self._last.a[refs] = bits
        else:
            values = bits
        t = np.ascontiguousarray(batch.t, np.int64)
        ns = len(batch.new_series)
        if ns:
            keys = batch.series_keys
            if keys is None or len(keys) != ns:
                keys = series_keys([labels for _, labels in batch.new_series])
            series = [np.fromiter((s for s, _ in batch.new_series), np.int64, ns).tobytes(),
                      np.fromiter(map(len, keys), np.uint32, ns).tobytes(), b"".join(keys)]
        else:
            series = []
        meta = json.dumps([(m.metric, m.type, m.help, m.unit) for m in batch.metadata],
                          separators=(",", ":")).encode() if batch.metadata else b""
        body = b"".join([_HEADER.pack(flags, len(added), ns, len(meta), n), added.astype(_I64).tobytes(),
                         *series, meta, _shuffle(_deltas(refs)), _shuffle(_deltas(t)),
                         _shuffle(values)])
        return MAGIC + self._zstd.compress(body)


@functools.cache
def _empty_record() -> bytes:
    """The record of a write without float samples, series or metadata, as ``encode`` writes it (the same for
    every segment: such a record reads and changes none of the segment's state)."""
    batch = AppendBatch()
    return SegmentEncoder()._encode(batch, batch.sid, 0)


class SegmentDecoder:
    """Decodes the records of one segment in order (A3 with its state; A1/A2 without)."""

    def __init__(self) -> None:
        self._sids = _Column(np.int64)
        self._last = _Column(np.uint64)
        self._zstd = zstandard.ZstdDecompressor()

    def decode(self, payload: bytes) -> AppendBatch:
        batch, sids, keys = self.decode_raw(payload)
        batch.new_series = list(zip(sids.tolist(), map(labels_from_key, keys)))
        batch.series_keys = keys
        return batch

    def decode_raw(self, payload: bytes) -> tuple[AppendBatch, np.ndarray, list[bytes]]:
        """(the record without its new series, their sids, their series keys): start-up registers
        the series of all records at once from the keys (Catalog.add_keys)."""
        if payload[:2] != MAGIC:
            batch = records.decode(payload)
            sids = np.fromiter((s for s, _ in batch.new_series), np.int64, len(batch.new_series))
            keys = series_keys([lb for _, lb in batch.new_series])
            batch.new_series = []
            return batch, sids, keys
        body = self._zstd.decompress(payload[2:])
        flags, n_added, ns, mlen, n = _HEADER.unpack_from(body, 0)
        pos = _HEADER.size
        self._sids.extend(np.frombuffer(body, _I64, n_added, pos))
        self._last.extend(np.zeros(n_added, np.uint64))
        pos += 8 * n_added
        sids, keys, pos = records.read_series_keys(body, pos, ns)
        meta = json.loads(body[pos:pos + mlen]) if mlen else []
        pos += mlen
        refs = np.cumsum(_unshuffle(body, pos, n, _I64))
        t = np.cumsum(_unshuffle(body, pos + 8 * n, n, _I64))
        values = _unshuffle(body, pos + 16 * n, n, _U64)
        if flags & _XOR:
            values = values ^ self._last.a[refs]
            self._last.a[refs] = values
        return (AppendBatch(sid=self._sids.a[refs], t=t, v=values.view(np.float64),
                            metadata=[MetricMetadata(*m) for m in meta]), sids, keys)
