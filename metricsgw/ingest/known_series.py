"""The 1.0 series the ingest cache knows for good, by their 128-bit key (``remote/series_keys.py``): stored
(the series' confirmed id) or dropped by the relabel rules. These are the entries every later write of a
scrape looks up; the cache's other entries (admitted but not yet stored, refused, and every 2.0 key) stay in
the pipeline's dict.

Why arrays and not that dict: a write of 2,000 known series looked its keys up in ~0.6 ms of the shard's
~3 ms (2,000 Python bytes objects made, hashed and probed in a dict of 16-byte keys), and each entry held
~120 B (a bytes key, an int id, a dict slot). Here a lookup is one compiled pass over the key halves the
scan already has (``scrape_scan.py``), without the GIL, and an entry costs 25 B a slot at a load of
0.35-0.7.

Entries only come in (a key's entry is final) until the rules change or retention drops series: then the
table is cleared, or rebuilt without those series (``forget``).
"""

from __future__ import annotations

import numpy as np

from ..remote.series_keys import halves

SID = 1  # the slot states of _known_kernel (0: empty)
DROPPED = 2
_MAX_LOAD = 0.7
_MIN_CAPACITY = 1024


class KnownSeries:
    def __init__(self) -> None:
        self._kernel = None  # _known_kernel, imported at the first entry
        self._count = 0
        self._alloc(0)

    def __len__(self) -> int:
        return self._count

    def add_ids(self, keys: list[bytes], sids: list[int]) -> None:
        """These series are stored, as these ids."""
        if keys:
            self._insert(*halves(keys), np.full(len(keys), SID, np.uint8), np.asarray(sids, np.int64))

    def add_dropped(self, keys: list[bytes]) -> None:
        """The relabel rules drop these series."""
        if keys:
            self._insert(*halves(keys), np.full(len(keys), DROPPED, np.uint8), np.zeros(len(keys), np.int64))

    def resolve(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(per key its id, which keys are dropped or None: none) if every key is known; else None (it stops
        at the first one it does not know). A dropped key's id means nothing."""
        n = len(hi)
        if self._count == 0:
            return None if n else (np.zeros(0, np.int64), None)
        state, sids = np.empty(n, np.uint8), np.empty(n, np.int64)
        if self._kernel.find(self._hi, self._lo, self._state, self._val, hi, lo, state, sids, True) < n:
            return None
        dropped = state == DROPPED
        return sids, (dropped if dropped.any() else None)

    def find(self, keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Per key its state (0: not known here, SID, DROPPED) and id."""
        n = len(keys)
        state, sids = np.zeros(n, np.uint8), np.zeros(n, np.int64)
        if self._count and n:
            self._kernel.find(self._hi, self._lo, self._state, self._val, *halves(keys), state, sids, False)
        return state, sids

    def nbytes(self) -> int:
        return self._hi.nbytes + self._lo.nbytes + self._state.nbytes + self._val.nbytes

    def clear(self) -> None:
        self._count = 0
        self._alloc(0)

    def forget(self, gone: np.ndarray) -> None:
        """Drop the entries of these series ids (retention dropped the series)."""
        live = self._state != 0
        live &= ~((self._state == SID) & np.isin(self._val, gone))
        if live.sum() == self._count:
            return
        hi, lo, state, val = self._hi[live], self._lo[live], self._state[live], self._val[live]
        self.clear()
        self._insert(hi, lo, state, val)

    # ------------------------------------------------------------------ internals

    def _alloc(self, entries: int) -> None:
        capacity = _MIN_CAPACITY
        while entries > capacity * _MAX_LOAD / 2:  # room to grow to twice as many before the next rehash
            capacity *= 2
        self._hi = np.zeros(capacity, np.uint64)
        self._lo = np.zeros(capacity, np.uint64)
        self._state = np.zeros(capacity, np.uint8)
        self._val = np.zeros(capacity, np.int64)

    def _insert(self, hi: np.ndarray, lo: np.ndarray, state: np.ndarray, val: np.ndarray) -> None:
        if self._kernel is None:
            from . import _known_kernel

            self._kernel = _known_kernel
        if self._count + len(hi) > len(self._hi) * _MAX_LOAD:
            live = self._state != 0
            old = self._hi[live], self._lo[live], self._state[live], self._val[live]
            self._alloc(self._count + len(hi))
            self._count = self._kernel.insert(self._hi, self._lo, self._state, self._val, *old)
        self._count += self._kernel.insert(self._hi, self._lo, self._state, self._val, hi, lo, state, val)


def warm() -> None:
    """Import and compile the table's kernels now (a table does it at its first entry otherwise)."""
    from . import _known_kernel

    _known_kernel.warm()
