"""Count, sum and counter-reset hint of every stored histogram a query loaded, without parsing them.

A selection over native histograms needs these of every loaded sample (which are stale markers, the counts
and sums ``histogram_count``/``histogram_sum`` answer, the hints a rate checks) but the buckets only of the
samples a step or window picks. Parsing each loaded histogram with protobuf to read three numbers cost ~2 us
and ~1.3 KB held per histogram; the compiled pass (_histogram_kernel.py) reads them from the stored bytes at a
few ns each, holding 24 bytes. It loads with the range query's kernels (compiled.py); until it has loaded, and
for a message it cannot walk, protobuf reads them, giving the same numbers.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..remote.proto import remote_v1_pb2 as v1pb

log = logging.getLogger(__name__)

_kernel = None
_loading = threading.Lock()


def read(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, sum, reset hint) of each message ``data[offsets[i]:offsets[i + 1]]``."""
    kernel = _kernel
    n = len(offsets) - 1
    if kernel is not None:
        count, total, hint, ok = kernel(np.ascontiguousarray(data, np.uint8), np.ascontiguousarray(offsets, np.int64))
        todo = np.flatnonzero(~ok).tolist()
    else:
        count, total, hint = np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
        todo = range(n)
    for i in todo:
        m = v1pb.Histogram.FromString(data[offsets[i]:offsets[i + 1]].tobytes())
        count[i] = m.count_float if m.WhichOneof("count") == "count_float" else float(m.count_int)
        total[i], hint[i] = m.sum, m.reset_hint
    return count, total, hint


def loaded() -> bool:
    return _kernel is not None


def load() -> bool:
    """Load the kernel now (blocking); whether it is usable."""
    global _kernel
    with _loading:
        if _kernel is None:
            try:
                from ._histogram_kernel import scalars

                scalars(np.zeros(0, np.uint8), np.zeros(1, np.int64))  # compile, or load from numba's cache
            except Exception as err:  # a machine numba cannot compile for: protobuf reads them
                log.warning("compiled histogram kernel not loaded, histograms are parsed to read counts: %s", err)
                return False
            _kernel = scalars
    return True


def unload() -> None:
    """Back to protobuf (tests compare the two)."""
    global _kernel
    with _loading:
        _kernel = None
