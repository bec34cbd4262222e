"""Float formatting exactly like Go's strconv.FormatFloat(v, 'f', -1, 64), which
Prometheus uses for sample values in JSON and for count_values labels."""

from __future__ import annotations

import math

import numpy as np


def format_value(x: float) -> str:
    x = float(x)
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    r = repr(x)  # shortest round-trip digits, like Go's -1 precision
    if "e" in r:
        return np.format_float_positional(x, unique=True, trim="-")
    if r.endswith(".0"):
        return r[:-2]
    return r


def format_values(values: np.ndarray) -> list[str]:
    """Vectorised fast path: integral values in int64 range go through int formatting."""
    values = np.asarray(values, np.float64)
    out: list[str]
    if len(values) == 0:
        return []
    integral = np.isfinite(values) & (np.abs(values) < 1e15) & (values == np.round(values))
    if integral.all():
        ints = values.astype(np.int64)
        out = [str(i) for i in ints.tolist()]
        neg_zero = (values == 0) & np.signbit(values)
        if neg_zero.any():
            for i in np.flatnonzero(neg_zero).tolist():
                out[i] = "-0"
        return out
    return [format_value(x) for x in values.tolist()]
