"""Value -> the ``data`` object of Prometheus's query API JSON.

Timestamps are seconds as JSON numbers (ms precision); values are strings formatted as
Prometheus 2.42 does (see format.py: 'f' layout, exponent only below 1e-6 or from 1e21).
``render`` gives plain dicts; ``render_json`` writes the same thing as JSON bytes directly,
which is several times faster for big matrices than json.dumps of the dicts.
"""

from __future__ import annotations

import json

import numpy as np

from ..model import Labels
from .format import format_json, format_json_values
from .value import Matrix, Scalar, String, Value, Vector


def _metric(labels: Labels) -> dict[str, str]:
    return dict(labels)


def _ts_strings(t_ms: np.ndarray) -> list[str]:
    """ms -> seconds as JSON number text: 1700000000, 1700000000.5, 1700000000.123."""
    t_ms = np.asarray(t_ms, np.int64)
    secs, ms = np.divmod(t_ms, 1000)
    out = list(map(str, secs.tolist()))
    for i in np.flatnonzero(ms).tolist():
        out[i] = f"{secs[i]}.{ms[i]:03d}".rstrip("0")
    return out


def _ts_number(t_ms: int):
    return t_ms // 1000 if t_ms % 1000 == 0 else t_ms / 1000.0


def _one_ts(t_s: float):
    return _ts_number(int(round(t_s * 1000)))


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
        ts = [_ts_number(t) for t in value.t_ms.tolist()]
        vals = format_json_values(value.v)
        out = []
        offs = value.offsets.tolist()
        for i, l in enumerate(value.labels):
            a, b = offs[i], offs[i + 1]
            out.append({"metric": _metric(l), "values": list(map(list, zip(ts[a:b], vals[a:b])))})
        return {"resultType": "matrix", "result": out}
    raise TypeError(f"cannot render {type(value).__name__}")


def render_json(value: Value) -> bytes:
    """The ``data`` object as JSON bytes (same content as json.dumps(render(value)))."""
    if not isinstance(value, Matrix):
        return json.dumps(render(value), separators=(",", ":")).encode()
    ts = _ts_strings(value.t_ms)
    vals = format_json_values(value.v)  # never needs JSON escaping: digits, '.', 'e', '+', '-', NaN, Inf
    offs = value.offsets.tolist()
    parts = ['{"resultType":"matrix","result":[']
    for i, l in enumerate(value.labels):
        a, b = offs[i], offs[i + 1]
        if i:
            parts.append(",")
        parts.append('{"metric":')
        parts.append(json.dumps(_metric(l), separators=(",", ":")))
        parts.append(',"values":[')
        parts.append(",".join([f'[{t},"{v}"]' for t, v in zip(ts[a:b], vals[a:b])]))
        parts.append("]}")
    parts.append("]}")
    return "".join(parts).encode()
