"""Binary searches of many ids in a big sorted array (the catalog's sid index, a WAL segment's refs)."""

from __future__ import annotations

import numpy as np


def search_sorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted(haystack, needles)`` clipped to the last position, with the needles searched in
    sorted order: each search then starts where the last one ended and reads memory the previous one has
    just read, about twice as fast for a request's 2,000 random sids in 200k (the sort costs a tenth of
    that). ``haystack`` must not be empty."""
    if len(needles) < 64:
        return np.minimum(np.searchsorted(haystack, needles), len(haystack) - 1)
    order = np.argsort(needles)
    pos = np.empty(len(needles), np.int64)
    pos[order] = np.searchsorted(haystack, needles[order])
    return np.minimum(pos, len(haystack) - 1)
