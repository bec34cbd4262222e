"""Binary searches of many ids in a big sorted array (the catalog's sid index, a WAL segment's refs)."""

from __future__ import annotations

import numpy as np


def search_sorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted(haystack, needles)`` clipped to the last position, with the needles searched in
    sorted order: each search then starts where the last one ended and reads memory the previous one has
    just read. Measured over the whole write path (in-process, 2,000 known series a write, 195k series):
    2.52 against 2.69 CPU s per 1M samples, mean of 4 runs each on a busy machine, every pair in its
    favour; alone, with the caches evicted between calls, it measured slower (0.43 against 0.31 ms), so
    the gain is small and comes from the memory the rest of a write leaves warm. ``haystack`` must not
    be empty."""
    if len(needles) < 64 or (needles[1:] >= needles[:-1]).all():  # sorted already (a spans file's sids): 2 ms, not
        return np.minimum(np.searchsorted(haystack, needles), len(haystack) - 1)  # an argsort (0.1 s at 2.7M)
    order = np.argsort(needles)
    pos = np.empty(len(needles), np.int64)
    pos[order] = np.searchsorted(haystack, needles[order])
    return np.minimum(pos, len(haystack) - 1)
