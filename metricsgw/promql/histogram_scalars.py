"""Count, sum and counter-reset hint of every stored histogram a query loaded, without parsing them.

A selection over native histograms needs these of every loaded sample (which are stale markers, the counts
and sums ``histogram_count``/``histogram_sum`` answer, the hints a rate checks) but the buckets only of the
samples a step or window picks. Parsing each loaded histogram with protobuf to read three numbers cost ~2 us
and ~1.3 KB held per histogram; the compiled pass (_histogram_kernel.py) reads them from the stored bytes at a
few ns each, holding 24 bytes. ``rows`` reads the buckets of those a histogram rate's windows hold the same way
(native_columns.py). They load with the range query's kernels (compiled.py); until they have loaded, and for a
message they cannot walk, protobuf reads them, giving the same numbers.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

import numpy as np

from ..remote.proto import remote_v1_pb2 as v1pb

log = logging.getLogger(__name__)

_kernel = None
_rows = None
_loading = threading.Lock()


class Rows(NamedTuple):
    """Histograms as columns (``rows``): per histogram its scalars, part sizes and starts, whether it was read
    (``ok``) and whether its layout is the previous one's (``same``); then the parts, flat."""

    schema: np.ndarray
    zero_threshold: np.ndarray
    zero_count: np.ndarray
    count: np.ndarray
    sum: np.ndarray
    sizes: np.ndarray  # (n, 7): positive spans, negative spans, positive values, negative values, custom values, ...
    starts: np.ndarray  # (n, 3): where its spans, values, custom values begin
    ok: np.ndarray
    same: np.ndarray
    span_offset: np.ndarray
    span_length: np.ndarray
    values: np.ndarray  # absolute bucket counts, positive then negative
    custom_values: np.ndarray


def rows(data: np.ndarray, offsets: np.ndarray, js: np.ndarray) -> Rows | None:
    """The histograms ``js`` (ascending) as columns, or None until the kernel has loaded (then callers parse
    them). A histogram outside the common encoding is not read (``ok`` False): its caller parses it."""
    kernel = _rows
    if kernel is None:
        return None
    return Rows(*kernel(np.ascontiguousarray(data, np.uint8), np.ascontiguousarray(offsets, np.int64),
                        np.ascontiguousarray(js, np.int64)))


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
    global _kernel, _rows
    with _loading:
        if _kernel is None:
            try:
                from ._histogram_kernel import rows as rows_kernel
                from ._histogram_kernel import scalars

                scalars(np.zeros(0, np.uint8), np.zeros(1, np.int64))  # compile, or load from numba's cache
                rows_kernel(np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(0, np.int64))
            except Exception as err:  # a machine numba cannot compile for: protobuf reads them
                log.warning("compiled histogram kernels not loaded, histograms are parsed instead: %s", err)
                return False
            _kernel, _rows = scalars, rows_kernel
    return True


def unload() -> None:
    """Back to protobuf (tests compare the two)."""
    global _kernel, _rows
    with _loading:
        _kernel = _rows = None
