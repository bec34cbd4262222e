"""A range query's two hottest loops, compiled: the windows of a step grid found in each series' samples
(selectors.py) and the rate family's extrapolation over them (rangefuncs.py).

Why compiled: in numpy both take a dozen passes over the samples and as many (series x steps) buffers; at 100
nodes they were half of a cold `sum by (namespace) (rate(...[5m]))` panel's 20 ms, at the seed's scale seconds
of a refresh. One pass per series, compiled, is 5-10x cheaper and releases the GIL (nogil) for the batches' other
threads. The kernels (_window_kernel.py) give the same numbers as the numpy paths, bit for bit; the tests run
both on the same windows.

numba is imported and the kernels loaded (from numba's on-disk cache after the first compile) in a background
thread when a process that evaluates PromQL starts (compiled.py); until they are ready, and on a machine where
they cannot load, these return None and callers take the numpy path.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

log = logging.getLogger(__name__)

_kernels = None  # the compiled module, once loaded
_loading = threading.Lock()


def grid_search(offsets: np.ndarray, t: np.ndarray, first: int, step: int, steps: int, side: str
                ) -> np.ndarray | None:
    """selectors._search_grid, compiled; None until loaded."""
    k = _kernels
    if k is None:
        return None
    return k.grid_search(_c(offsets), _c(t), np.int64(first), np.int64(step), int(steps), side == "right")


def extrapolated_rate(t: np.ndarray, v: np.ndarray, lo: np.ndarray, hi: np.ndarray, range_end: np.ndarray,
                      range_ms: int, is_counter: bool, is_rate: bool, prometheus_3: bool
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, has a value) of rangefuncs.extrapolated_rate's windows, compiled; None until loaded."""
    k = _kernels
    if k is None:
        return None
    return k.extrapolated_rate(_c(t), _c(v, np.float64), _c(lo), _c(hi), _c(range_end), np.int64(range_ms),
                               bool(is_counter), bool(is_rate), bool(prometheus_3))


def _c(a: np.ndarray, dtype=np.int64) -> np.ndarray:
    """One array type per argument (C order, the kernel's dtype), so each kernel compiles once."""
    return np.ascontiguousarray(a, dtype)


def loaded() -> bool:
    return _kernels is not None


def load() -> bool:
    """Load the kernels now (blocking); whether they are usable."""
    global _kernels
    with _loading:
        if _kernels is None:
            try:
                from . import _window_kernel as k

                _warm(k)
            except Exception as err:  # a machine numba cannot compile for: the numpy paths answer
                log.warning("compiled window kernels not loaded, range queries take the numpy path: %s", err)
                return False
            _kernels = k
    return True


def unload() -> None:
    """Back to the numpy paths (tests compare the two)."""
    global _kernels
    with _loading:
        _kernels = None


def _warm(k) -> None:
    """Compile (or load from the cache) each kernel for the argument types callers pass."""
    offsets = np.array([0, 2], np.int64)
    t = np.array([1_000, 16_000], np.int64)
    v = np.array([1.0, 2.0])
    lo = k.grid_search(offsets, t, np.int64(0), np.int64(15_000), 2, False)
    hi = k.grid_search(offsets, t, np.int64(15_000), np.int64(15_000), 2, True)
    k.extrapolated_rate(t, v, lo, hi, np.array([15_000, 30_000], np.int64), np.int64(15_000), True, True, True)
