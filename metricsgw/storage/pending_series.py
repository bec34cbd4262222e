"""Series registered since the last flush, waiting for the flush to write them to the series table.

Held as Arrow columns, one chunk per append (sid int64, ``model.series_key`` binary): about 12
bytes per series beside the key itself. A Python list of (int, bytes) tuples cost ~110 bytes more
per series (object headers, the tuple, the int), and between two flushes every new series sits here:
at 200k new series that was ~22 MB of RSS.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class PendingSeries:
    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, pa.BinaryArray]] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, sids, keys: list[bytes]) -> None:
        """Series in the order given (``sids`` int64 array or list, ``keys`` their series keys)."""
        if not len(keys):
            return
        sids = np.asarray(sids, np.int64)
        if len(sids) != len(keys):
            raise ValueError(f"{len(sids)} sids for {len(keys)} keys")
        self._chunks.append((sids, pa.array(keys, pa.binary())))
        self._n += len(keys)

    def take(self) -> "PendingSeries":
        """Everything pending, moved into a new object (this one is left empty)."""
        out = PendingSeries()
        out._chunks, out._n = self._chunks, self._n
        self._chunks, self._n = [], 0
        return out

    def put_back(self, older: "PendingSeries") -> None:
        """``older`` (taken by a flush that failed) goes before what was added since."""
        self._chunks[:0] = older._chunks
        self._n += older._n

    def columns(self) -> tuple[np.ndarray, pa.ChunkedArray]:
        """(sids, keys) of every pending series, in the order added (keys stay chunked: one binary
        array holds at most 2 GiB)."""
        sids = np.concatenate([s for s, _ in self._chunks]) if self._chunks else np.empty(0, np.int64)
        return sids, pa.chunked_array([k for _, k in self._chunks], pa.binary())
