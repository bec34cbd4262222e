"""Value -> the ``data`` object of Prometheus's query API JSON.

Timestamps are seconds as JSON numbers (ms precision); values are strings formatted as
Prometheus 2.42 does (see format.py: 'f' layout, exponent only below 1e-6 or from 1e21)."""

from __future__ import annotations

import numpy as np

from ..model import Labels
from .format import format_json, format_json_values
from .value import Matrix, Scalar, String, Value, Vector


def _metric(labels: Labels) -> dict[str, str]:
    return dict(labels)


def _ts(t_ms: np.ndarray) -> list:
    """ms -> seconds; whole seconds as ints so JSON shows 1700000000, not 1700000000.0."""
    t_ms = np.asarray(t_ms, np.int64)
    whole = t_ms % 1000 == 0
    if whole.all():
        return (t_ms // 1000).tolist()
    secs = (t_ms / 1000.0).tolist()
    ints = (t_ms // 1000).tolist()
    return [i if w else s for i, s, w in zip(ints, secs, whole.tolist())]


def _one_ts(t_s: float):
    ms = int(round(t_s * 1000))
    return ms // 1000 if ms % 1000 == 0 else ms / 1000.0


def render(value: Value) -> dict:
    if isinstance(value, Scalar):
        return {"resultType": "scalar", "result": [_one_ts(value.t), format_json(value.v)]}
    if isinstance(value, String):
        return {"resultType": "string", "result": [_one_ts(value.t), value.s]}
    if isinstance(value, Vector):
        t = _one_ts(value.t)
        vals = format_json_values(value.values)
        return {
            "resultType": "vector",
            "result": [{"metric": _metric(l), "value": [t, v]} for l, v in zip(value.labels, vals)],
        }
    if isinstance(value, Matrix):
        ts = _ts(value.t_ms)
        vals = format_json_values(value.v)
        out = []
        offs = value.offsets.tolist()
        for i, l in enumerate(value.labels):
            a, b = offs[i], offs[i + 1]
            out.append({"metric": _metric(l), "values": [list(p) for p in zip(ts[a:b], vals[a:b])]})
        return {"resultType": "matrix", "result": out}
    raise TypeError(f"cannot render {type(value).__name__}")
