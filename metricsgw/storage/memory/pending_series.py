"""Series registered since the last flush, waiting for the flush to write them to the series table.

Every new series sits here until the next flush (minutes), so its bytes count in RSS per series: one
chunk per append holds the sids (int64), the key lengths (uint32) and the joined ``model.series_key``s
compressed with zstd (level 1). The keys of one write share most of their bytes (metric and label
names, hosts, jobs): on the bench workload 2,000 keys of ~150 bytes take ~11 KB, 5 bytes a series,
for ~0.25 ms per write of 2,000 new series. A list of (int, bytes) tuples held ~260 bytes per series.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import zstandard

from ...model import series_keys
from ..batch import AppendBatch

_ZSTD_LEVEL = 1


class PendingSeries:
    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, np.ndarray, bytes]] = []  # (sids, key lengths, zstd(keys))
        self._n = 0
        self._zstd = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)

    def __len__(self) -> int:
        return self._n

    def add(self, sids, keys: list[bytes]) -> None:
        """Series in the order given (``sids`` int64 array or list, ``keys`` their series keys). Called under
        the storage's swap lock (one writer at a time: the compressor is not shared between threads)."""
        if not len(keys):
            return
        sids = np.asarray(sids, np.int64)
        if len(sids) != len(keys):
            raise ValueError(f"{len(sids)} sids for {len(keys)} keys")
        lengths = np.fromiter(map(len, keys), np.uint32, len(keys))
        self._chunks.append((sids, lengths, self._zstd.compress(b"".join(keys))))
        self._n += len(keys)

    def take(self) -> "PendingSeries":
        """Everything pending, moved into a new object (this one is left empty)."""
        out = PendingSeries()
        out._chunks, out._n = self._chunks, self._n
        self._chunks, self._n = [], 0
        return out

    def sids(self) -> np.ndarray:
        """The sids of every pending series (int64, in the order added)."""
        return np.concatenate([s for s, _, _ in self._chunks]) if self._chunks else np.empty(0, np.int64)

    def put_back(self, older: "PendingSeries") -> None:
        """``older`` (taken by a flush that failed) goes before what was added since."""
        self._chunks[:0] = older._chunks
        self._n += older._n

    def columns(self) -> tuple[np.ndarray, pa.ChunkedArray]:
        """(sids, keys) of every pending series, in the order added (keys stay chunked: one binary array
        holds at most 2 GiB)."""
        if not self._chunks:
            return np.empty(0, np.int64), pa.chunked_array([], pa.binary())
        unzstd = zstandard.ZstdDecompressor()
        arrays = []
        for _, lengths, blob in self._chunks:
            offsets = np.zeros(len(lengths) + 1, np.int32)
            offsets[1:] = np.cumsum(lengths, dtype=np.int64)
            data = unzstd.decompress(blob, max_output_size=int(offsets[-1]))
            arrays.append(pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets),
                                                                           pa.py_buffer(data)]))
        return np.concatenate([s for s, _, _ in self._chunks]), pa.chunked_array(arrays, pa.binary())



class UnflushedSeries:
    """This writer's series not in a committed series file yet: those new since the last flush, and those the flush
    in progress took, until its commit. A head read tells a peer both (storage.recent_heads). Called inside the
    file set's ``atomically()``."""

    def __init__(self) -> None:
        self._pending = PendingSeries()  # new since the last flush: written by the next one
        self._committing = PendingSeries()  # taken by the flush in progress

    def __len__(self) -> int:
        """Series waiting for a flush."""
        return len(self._pending)

    def add(self, sids, keys: list[bytes]) -> None:
        self._pending.add(sids, keys)

    def take(self) -> PendingSeries:
        """What the flush cut now writes."""
        self._committing = self._pending.take()
        return self._committing

    def committed(self) -> None:
        self._committing = PendingSeries()

    def put_back(self, taken: PendingSeries) -> None:
        """The series of a flush that failed: the next flush writes them first."""
        self._pending.put_back(taken)
        self._committing = PendingSeries()

    def sids(self) -> np.ndarray:
        """Every one's sid (int64, unsorted)."""
        return np.concatenate([self._pending.sids(), self._committing.sids()])

def fresh_keys(batch: AppendBatch, fresh: list) -> list[bytes]:
    """The series keys of ``fresh`` (new series of ``batch`` storage did not know), reusing the ones
    the pipeline built for hashing (``batch.series_keys``, in ``batch.new_series`` order)."""
    keys = batch.series_keys
    if keys is None or len(keys) != len(batch.new_series):
        return series_keys([lb for _, lb in fresh])
    if len(fresh) == len(keys):  # none known or repeated: the same series in the same order
        return keys
    by_sid = dict(zip([sid for sid, _ in batch.new_series], keys))
    return [by_sid[sid] for sid, _ in fresh]
