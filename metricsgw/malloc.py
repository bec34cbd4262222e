"""Make glibc give query memory back to the OS (no-ops where glibc is not the allocator).

Two glibc habits keep RSS high long after a big query has freed everything:
- its mmap threshold is dynamic: once a large block (a numpy array of a few MiB) is freed, blocks
  up to that size are served from the heap arenas from then on, and a fragmented arena is
  only returned at its top. Fixing the threshold keeps big arrays in their own mappings,
  unmapped the moment they are freed.
- every thread that allocates concurrently may get its own arena (8 x cores), each keeping its
  freed memory. Fewer arenas and a ``malloc_trim`` after a big query return it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

import pyarrow as pa

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 1 << 20  # arrays of 1 MiB and more: their own mapping
TRIM_THRESHOLD = 8 << 20  # free heap top above this goes back at once
ARENA_MAX = 4  # 2 cores: the event loop, the WAL thread and a few query threads
TRIM_AFTER_BYTES = 32 << 20  # a query that held this much is followed by malloc_trim
TRIM_MIN_INTERVAL_S = 1.0  # trimming walks every arena: not after every one of many queries

_libc = None
_lock = threading.Lock()
_last_trim = 0.0
_pending: threading.Timer | None = None


def _glibc():
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            lib.mallopt  # glibc (and a few others) only
            lib.malloc_trim
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


def tune() -> bool:
    """Set the allocator up for a long-running server; call once at start-up, before threads."""
    lib = _glibc()
    if lib is None:
        return False
    ok = lib.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok &= lib.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    ok &= lib.mallopt(M_ARENA_MAX, ARENA_MAX) == 1
    return bool(ok)


def trim_after(peak_bytes: int) -> None:
    """After a query that held ``peak_bytes``: give free arena pages back. At most one trim a
    second; one asked for sooner runs when the second is up (the last of a burst is not lost)."""
    global _pending
    if peak_bytes < TRIM_AFTER_BYTES or _glibc() is None:
        return
    with _lock:
        wait = _last_trim + TRIM_MIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            if _pending is None:
                _pending = threading.Timer(wait, _trim)
                _pending.daemon = True
                _pending.start()
            return
    _trim()


def _trim() -> None:
    global _last_trim, _pending
    with _lock:
        _last_trim = time.monotonic()
        _pending = None
    _glibc().malloc_trim(0)


def release_free_memory() -> None:
    """Give freed memory back to the OS after a flush.

    A flush allocates and frees hundreds of MB of numpy/Arrow buffers. glibc keeps freed heap
    memory (its mmap threshold adapts upward, so big buffers land on the heap) and Arrow's
    mimalloc pool keeps its pages: measured at 120k series, ~1.7 KB of RSS per series stayed
    resident after each flush. malloc_trim(0) and release_unused() return it.
    """
    pa.default_memory_pool().release_unused()
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(0)
