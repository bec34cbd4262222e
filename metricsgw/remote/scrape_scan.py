"""The steady state of remote write, compiled: a 1.0 WriteRequest in the shape of a scrape (every series its
labels, then exactly one sample) read in one pass, each series' label bytes hashed as the ingest cache keys
them (seeded XXH3-128, ``series_keys.py``).

Why compiled: in numpy (fastscan.py) this costs ~2 ms of a shard's ~6 ms per 2,000-series request, in a
dozen passes and 2,000 Python bytes objects; one pass over the bytes, with no object per series, costs
~0.3 ms and releases the GIL (nogil), so the WAL thread runs meanwhile.

Safety: the bytes are a sender's. Every length is checked against its field's end before use, and the
kernel is compiled with bounds checking, so a malformed request cannot read outside its buffer: it is
refused here (None) and the generated-code path parses it and names what is wrong. Nothing here judges a
series' labels: the caller takes a series only if its key hashes to one the full path validated before.

The hash is python-xxhash's own XXH3 (the symbol in its extension module, called from the kernel), so a key
is bit for bit what ``xxhash.xxh3_128_digest`` gives. numba is imported and the kernel loaded (from numba's
on-disk cache after the first compile) in a background thread (compiled.py) at a writer's start, or at
its first write (api/remote_write.py); until it is ready, and on a machine where it cannot load, callers get None and take
the numpy path. This module never starts that load itself: compiled.py imports it to load it.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

NOT_THE_SHAPE = 0  # the kernel's status: not a scrape-shaped request (or malformed); the caller parses it
SCANNED = 1


class ScrapeScan(NamedTuple):
    """Series i's label records are ``raw[starts[i]:label_ends[i]]``, its key's high and low 64-bit halves
    ``hi[i]``, ``lo[i]`` (``series_keys.halves``), its sample (``t[i]``, ``v[i]``), or, where
    ``hist_start[i] >= 0``, its native histogram's message ``raw[hist_start[i]:hist_end[i]]`` instead;
    ``has_metadata``: the request carries metadata (parse it apart)."""

    starts: np.ndarray
    label_ends: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    t: np.ndarray
    v: np.ndarray
    has_metadata: bool
    hist_start: np.ndarray
    hist_end: np.ndarray


_kernel = None  # the compiled scan, once loaded
_loading = threading.Lock()


def scan(raw: bytes, seed: int) -> ScrapeScan | None:
    """The request read as a scrape, keys seeded with ``seed``; None if it is not in that shape (or the
    kernel is not loaded yet)."""
    kernel = _kernel
    if kernel is None:
        return None
    status, n, starts, label_ends, hi, lo, t, v, has_metadata, h_start, h_end = kernel(
        np.frombuffer(raw, np.uint8), np.uint64(seed))
    if status != SCANNED:
        return None
    # numba's arrays carry dtype objects of their own: equal to numpy's, but not the same object, and
    # ufunc.at (the catalog's touch) then leaves its fast loop: 0.2 ms instead of 5 us for 2,000 samples.
    return ScrapeScan(starts[:n].view(np.int64), label_ends[:n].view(np.int64), hi[:n].view(np.uint64),
                      lo[:n].view(np.uint64), t[:n].view(np.int64), v[:n].view(np.float64), bool(has_metadata),
                      h_start[:n].view(np.int64), h_end[:n].view(np.int64))


def loaded() -> bool:
    return _kernel is not None


def load() -> bool:
    """Load the kernel now (blocking); whether it is usable."""
    global _kernel
    with _loading:
        if _kernel is None:
            from ._scrape_kernel import compiled_scan

            _kernel = compiled_scan()
    return _kernel is not None

