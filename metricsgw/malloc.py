"""Make glibc give query memory back to the OS (no-ops where glibc is not the allocator).

Two glibc habits keep RSS high long after a big query has freed everything:
- its mmap threshold is dynamic: once a large block is freed, blocks up to that size (up to 32 MiB)
  are served from the heap arenas from then on, and a fragmented arena is only returned at its top.
  Fixing the threshold keeps the biggest arrays (a batch of a big aggregation) in their own
  mappings, unmapped the moment they are freed. It is fixed at glibc's own ceiling, not lower:
  an array in its own mapping is mapped, page-faulted and zeroed afresh on every allocation, and a
  dashboard query makes dozens of (series x step) temporaries of 1-30 MiB. At 1 MiB that doubled
  the CPU of the heavy panels (bench.engine_cpu, 100 nodes: apiserver p99 231 -> 118 ms, top
  talkers 131 -> 79 ms); what they leave in the arenas goes back by ``trim_after``.
- every thread that allocates concurrently may get its own arena (8 x cores), each keeping its
  freed memory. Fewer arenas and a ``malloc_trim`` return it: after a big query, and once queries
  have stopped for a moment (``IDLE_TRIM_S``). Not after every query: the next one would fault its
  pages in again, and a dashboard sends its panels back to back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import threading
import time

import pyarrow as pa

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD = 32 << 20  # arrays of 32 MiB and more: their own mapping (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 64 << 20  # free heap top above this goes back at once (2x the threshold, as glibc's own)
ARENA_MAX = 4  # 2 cores: the event loop, the WAL thread and a few query threads
TRIM_AFTER_BYTES = 32 << 20  # a query that held this much is followed by malloc_trim
TRIM_MIN_INTERVAL_S = 1.0  # trimming walks every arena: not after every one of many queries
IDLE_TRIM_S = 2.0  # no query ended for this long: trim whatever the last ones left in the arenas
YOUNG_GENERATIONS = 1  # gc.collect(1): generations 0 and 1, not the oldest

_libc = None
_lock = threading.Lock()
_last_trim = 0.0
_pending: threading.Timer | None = None
_last_end = 0.0  # when the last query ended (monotonic)
_idle: threading.Timer | None = None  # the trim waiting for queries to stop


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
    """After a query that held ``peak_bytes``: give free arena pages back, at once after a big one
    and otherwise when no query has ended for IDLE_TRIM_S. At most one trim a second; one asked for
    sooner runs when the second is up (the last of a burst is not lost)."""
    global _pending, _last_end, _idle
    if _glibc() is None:
        return
    with _lock:
        _last_end = time.monotonic()
        if _idle is None:
            _idle = _timer(IDLE_TRIM_S, _when_idle)
    if peak_bytes < TRIM_AFTER_BYTES:
        return
    with _lock:
        wait = _last_trim + TRIM_MIN_INTERVAL_S - time.monotonic()
        if wait > 0:
            if _pending is None:
                _pending = _timer(wait, _trim)
            return
    _trim()


def _when_idle() -> None:
    """The idle timer: trim if no query ended since it was set, else wait for the rest of the idle time."""
    global _idle
    with _lock:
        wait = _last_end + IDLE_TRIM_S - time.monotonic()
        if wait > 0:
            _idle = _timer(wait, _when_idle)
            return
        _idle = None
    _trim()


def _timer(delay_s: float, fn) -> threading.Timer:
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()
    return timer


def _trim() -> None:
    global _last_trim, _pending
    with _lock:
        _last_trim = time.monotonic()
        _pending = None
    # Cycles the queries left (their arrays included) are freed first, so their pages go back too; the young
    # generations only, as what a query left is young (gcpolicy.py: why never a full collection here).
    gc.collect(YOUNG_GENERATIONS)
    release_free_memory()


def release_free_memory() -> None:
    """Give freed memory back to the OS: after a flush, after start-up, and as queries' ``_trim``.

    A flush allocates and frees hundreds of MB of numpy/Arrow buffers. glibc keeps freed heap
    memory (its mmap threshold adapts upward, so big buffers land on the heap) and Arrow's
    mimalloc pool keeps its pages: measured at 120k series, ~1.7 KB of RSS per series stayed
    resident after each flush. malloc_trim(0) and release_unused() return it. Opening 195k series
    (500 nodes) left 385 MiB of Pss, 134 MiB once both had run: malloc_trim alone gave back half of it.
    """
    pa.default_memory_pool().release_unused()
    je = _jemalloc()
    if je is not None:  # every arena's dirty pages back now (MALLCTL_ARENAS_ALL), not at their decay
        je.mallctl(b"arena.4096.purge", None, None, None, 0)
        return
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(0)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def heap_bytes() -> dict[str, int]:
    """What the C allocator holds, by kind: ``in_use`` (live blocks), ``free`` (freed memory it keeps: glibc's
    arenas' free blocks; jemalloc's resident pages beyond its live blocks), ``mapped`` (glibc: big blocks in a
    mapping of their own), and Arrow's pool. Memory Python's object allocator maps itself is in none of these."""
    out = {"arrow_pool": pa.total_allocated_bytes()}
    je = _jemalloc()
    if je is not None:
        epoch = ctypes.c_uint64(1)
        je.mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.sizeof(epoch))  # refresh its statistics
        allocated, resident = _mallctl_size(je, b"stats.allocated"), _mallctl_size(je, b"stats.resident")
        out.update(malloc_in_use=allocated, malloc_free=max(0, resident - allocated), malloc_mapped=0)
        return out
    lib = _glibc()
    fn = getattr(lib, "mallinfo2", None) if lib is not None else None
    if fn is None:  # glibc < 2.33
        return out
    fn.restype = _Mallinfo2
    info = fn()
    out.update(malloc_in_use=info.uordblks, malloc_free=info.fordblks, malloc_mapped=info.hblkhd)
    return out


# --- jemalloc (--server.allocator)
#
# Under 4 dashboards at 500 nodes, glibc kept 300-500 MiB of freed memory resident in the query process (free blocks
# between live ones, which malloc_trim cannot give back) and the process tree's Pss peaked at 1,632 MiB; with
# jemalloc preloaded the same run peaked at ~1,150 MiB (bench/RESULTS.md, the soak). jemalloc sorts blocks by size
# into their own pages and returns emptied pages after ``dirty_decay_ms`` from a background thread.

JEMALLOC = "libjemalloc.so.2"
JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0"
_JEMALLOC_DIRS = ("/usr/lib/*-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
EXEC_MARK = "METRICSGW_ALLOCATOR"  # set in the environment of the process started again with the allocator
_je = None


def _jemalloc():
    """The process's jemalloc when it is the allocator (preloaded), else None."""
    global _je
    if _je is None:
        lib = ctypes.CDLL(None)
        _je = lib if hasattr(lib, "mallctl") else False
    return _je or None


def _mallctl_size(lib, name: bytes) -> int:
    value, size = ctypes.c_size_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
    return value.value if lib.mallctl(name, ctypes.byref(value), ctypes.byref(size), None, 0) == 0 else 0


def allocator() -> str:
    """The C allocator this process runs on: jemalloc, glibc or other."""
    return "jemalloc" if _jemalloc() is not None else "glibc" if _glibc() is not None else "other"


def jemalloc_path() -> str | None:
    import glob

    for pattern in _JEMALLOC_DIRS:
        found = sorted(glob.glob(os.path.join(pattern, JEMALLOC)))
        if found:
            return found[0]
    return None


def restart_env(choice: str, env: dict[str, str]) -> dict[str, str] | None:
    """The environment to start this program again in for ``--server.allocator=choice``, or None to go on as it
    is: glibc asked for, jemalloc already preloaded, already started again, or (``auto``) no jemalloc installed.
    ``jemalloc`` asked for and not installed: ValueError in words."""
    if choice == "glibc" or _jemalloc() is not None or env.get(EXEC_MARK):
        return None
    path = jemalloc_path()
    if path is None:
        if choice == "jemalloc":
            raise ValueError(f"--server.allocator=jemalloc: {JEMALLOC} is not installed (Debian: apt-get install "
                             "libjemalloc2); --server.allocator=glibc runs without it")
        return None
    preload = " ".join(p for p in (path, env.get("LD_PRELOAD", "")) if p)
    return env | {"LD_PRELOAD": preload, "MALLOC_CONF": env.get("MALLOC_CONF", JEMALLOC_CONF), EXEC_MARK: choice}
