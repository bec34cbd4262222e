"""Native histograms of a remote-write request checked in one compiled pass (``_native_kernel.py``): each one's
timestamp, and whether it is an integer histogram Prometheus' appender takes. Those are most; the rest (float
histograms, anything unusual or wrong) are parsed and judged by native.py, which words any refusal.

Why compiled: parsing each histogram with protobuf and checking it with numpy on arrays of a few dozen buckets
cost ~15 us a histogram, most of a shard's time on a histogram request; the pass costs well under 1 us.
Safety as scrape_scan.py: every length is checked against its message's end and the kernel is compiled with
bounds checking. Loaded beside the scrape kernel (compiled.py); until it is, ``check`` answers None and every
histogram takes the parser.
"""

from __future__ import annotations

import threading

import numpy as np

_kernel = None
_loading = threading.Lock()


def check(raws: list[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """(accepted: bool per histogram, timestamps: int64, those of accepted ones) or None while not loaded."""
    offsets = np.zeros(len(raws) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, raws), np.int64, len(raws)), out=offsets[1:])
    return check_in(b"".join(raws), offsets[:-1], offsets[1:])


def check_in(raw: bytes, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``check`` of the histograms at ``raw[starts[i]:ends[i]]``."""
    kernel = _kernel
    if kernel is None:
        return None
    status, t = kernel(np.frombuffer(raw, np.uint8), np.ascontiguousarray(starts, np.int64),
                       np.ascontiguousarray(ends, np.int64))
    return status.view(np.uint8) == 1, t.view(np.int64)


def load() -> bool:
    global _kernel
    with _loading:
        if _kernel is None:
            from ._native_kernel import compiled_check

            _kernel = compiled_check()
    return _kernel is not None
