"""The numba kernels of known_series.py: an open-addressing table of 128-bit keys (linear probing from the
key's low bits: the keys are XXH3 outputs, uniform already). Imported only by known_series.py, when a table
first takes a key (importing numba costs ~0.4 s and ~60 MiB, which only a process taking writes pays).

Slot j is empty when ``state[j] == EMPTY``; there are no deletions (a table that must forget is rebuilt), so
a probe ends at the first empty slot.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = 0


@njit(cache=True, nogil=True, boundscheck=True)
def insert(t_hi, t_lo, t_state, t_val, hi, lo, state, val):
    """Put each key with its state and value (replacing the key's entry if present); the number of keys new
    to the table. The caller keeps the load under 1: there is always an empty slot."""
    mask = np.uint64(len(t_hi) - 1)
    added = 0
    for i in range(len(hi)):
        j = lo[i] & mask
        while t_state[j] != EMPTY and (t_hi[j] != hi[i] or t_lo[j] != lo[i]):
            j = (j + np.uint64(1)) & mask
        if t_state[j] == EMPTY:
            added += 1
            t_hi[j] = hi[i]
            t_lo[j] = lo[i]
        t_state[j] = state[i]
        t_val[j] = val[i]
    return added


@njit(cache=True, nogil=True, boundscheck=True)
def find(t_hi, t_lo, t_state, t_val, hi, lo, state, val, stop_at_miss):
    """Each key's state (EMPTY: absent) and value into ``state``/``val``; the number of keys looked up, which
    is fewer than all only if ``stop_at_miss`` and a key is absent (the one at that index)."""
    mask = np.uint64(len(t_hi) - 1)
    for i in range(len(hi)):
        j = lo[i] & mask
        while t_state[j] != EMPTY and (t_hi[j] != hi[i] or t_lo[j] != lo[i]):
            j = (j + np.uint64(1)) & mask
        state[i] = t_state[j]
        val[i] = t_val[j]
        if stop_at_miss and t_state[j] == EMPTY:
            return i
    return len(hi)


def warm() -> None:
    """Compile (or load from numba's on-disk cache) both kernels for the types the table calls them with."""
    u64, i64, u8 = (np.zeros(2, np.uint64), np.zeros(2, np.int64), np.zeros(2, np.uint8))
    insert(u64.copy(), u64.copy(), u8.copy(), i64.copy(), u64[:1], u64[:1], np.ones(1, np.uint8), i64[:1])
    find(u64, u64, u8, i64, u64[:1], u64[:1], u8.copy()[:1], i64.copy()[:1], True)
