"""Value -> the ``data`` object of Prometheus's query API JSON.

Timestamps are seconds as JSON numbers (ms precision); values are strings formatted as
Prometheus 2.42 does (see format.py: 'f' layout, exponent only below 1e-6 or from 1e21).
``render`` gives plain dicts; ``render_json`` writes the same thing as JSON bytes directly,
which is several times faster for big matrices than json.dumps of the dicts.
"""

from __future__ import annotations

import numpy as np
import orjson

from ..model import Labels
from .format import format_json, format_json_values
from .native import to_json
from .value import Matrix, Scalar, String, Value, Vector


def _metric(labels: Labels) -> dict[str, str]:
    return dict(labels)


def _ts_numbers(t_ms: np.ndarray) -> list:
    """ms -> seconds as JSON numbers: int when whole (1700000000), else float (1700000000.5)."""
    t_ms = np.asarray(t_ms, np.int64)
    whole = t_ms % 1000 == 0
    if whole.all():
        return (t_ms // 1000).tolist()
    out = np.array((t_ms // 1000).tolist(), dtype=object)
    frac = np.flatnonzero(~whole)
    out[frac] = (t_ms[frac] / 1000.0).tolist()  # ms resolution: 13 significant digits, exact in repr
    return out.tolist()


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
        result = [{"metric": _metric(l), "value": [t, v]} for l, v in zip(value.labels, vals)]
        if value.hists:  # Prometheus lists a histogram sample as "histogram" instead of "value"
            rows = [(l, {"metric": _metric(l), "value": [t, v]}) for l, v in zip(value.labels, vals)]
            rows += [(l, {"metric": _metric(l), "histogram": [t, to_json(h)]})
                     for l, h in zip(value.hist_labels, value.hists)]
            result = [entry for _, entry in sorted(rows, key=lambda r: r[0])]
        return {"resultType": "vector", "result": result}
    if isinstance(value, Matrix):
        ts = [_ts_number(t) for t in value.t_ms.tolist()]
        vals = format_json_values(value.v)
        out = []
        offs = value.offsets.tolist()
        for i, l in enumerate(value.labels):
            a, b = offs[i], offs[i + 1]
            out.append({"metric": _metric(l), "values": list(map(list, zip(ts[a:b], vals[a:b])))})
        if value.hist_rows:
            out = _with_histograms(value, out)
        return {"resultType": "matrix", "result": out}
    raise TypeError(f"cannot render {type(value).__name__}")


def _with_histograms(value: Matrix, float_rows: list[dict]) -> list[dict]:
    """Float rows and histogram rows of a matrix merged by series, as Prometheus writes a series
    with both kinds of points: "values" then "histograms"."""
    by_labels = dict(zip(value.labels, float_rows))
    for labels, t_ms, hists in value.hist_rows:
        entry = by_labels.setdefault(labels, {"metric": _metric(labels)})
        entry["histograms"] = [[_ts_number(int(t)), to_json(h)] for t, h in zip(t_ms.tolist(), hists)]
    return [by_labels[l] for l in sorted(by_labels)]


def point_count(value: Value) -> int:
    """Points the JSON of ``value`` will hold (what rendering it costs grows with)."""
    if isinstance(value, Matrix):
        return len(value.v) + sum(len(r[2]) for r in value.hist_rows)
    if isinstance(value, Vector):
        return len(value.values) + len(value.hists)
    return 1


def render_json(value: Value) -> bytes:
    """The ``data`` object as JSON bytes (same content as json.dumps(render(value))).

    A matrix is built as (timestamp, value string) tuples per series, straight from the arrays,
    and serialised by orjson: ~0.1 us a point instead of ~1 us for dicts and json.dumps."""
    if not isinstance(value, Matrix) or value.hist_rows:
        return orjson.dumps(render(value))
    ts = _ts_numbers(value.t_ms)
    vals = format_json_values(value.v)  # never needs JSON escaping: digits, '.', 'e', '+', '-', NaN, Inf
    offs = value.offsets.tolist()
    result = [{"metric": _metric(l), "values": list(zip(ts[a:b], vals[a:b]))}
              for l, a, b in zip(value.labels, offs, offs[1:])]
    return orjson.dumps({"resultType": "matrix", "result": result})


# ---- a range query's JSON from pieces kept rendered (promql/results_cache.py) ---------------------------------
# The bytes are exactly render_json's: a cached refresh writes the same answer as one evaluation.

_CLOSE, _SEP = ord("]"), 2  # every point is `[t,"v"]` then a comma: the next starts 2 bytes after its ']'


def point_pieces(m: Matrix) -> tuple[bytes, np.ndarray]:
    """Every point of ``m`` rendered as ``[t,"v"],`` into one buffer, series after series as ``m`` holds them,
    and int64 [points + 1]: where each point starts (the last: the end)."""
    if not len(m.v):
        return b"", np.zeros(1, np.int64)
    inner = orjson.dumps(list(zip(_ts_numbers(m.t_ms), format_json_values(m.v))))[1:-1] + b","
    closes = np.flatnonzero(np.frombuffer(inner, np.uint8) == _CLOSE)  # ']' ends a point, nowhere else
    return inner, np.concatenate([[0], closes + _SEP]).astype(np.int64)


def metric_json(labels: Labels) -> bytes:
    # orjson's answer keeps its writer's whole buffer, 4 KiB at least, whatever its length; the copy is exact.
    # The results cache keeps one per series: ~350 bytes each, not 4 KiB (it held 4x the bytes it counted).
    return bytes(memoryview(orjson.dumps(_metric(labels))))


def matrix_json(rows: list[tuple[bytes, list[bytes]]]) -> bytes:
    """The ``data`` of a matrix from (metric JSON, its points' pieces in time order) per series, in label order."""
    out = [b'{"resultType":"matrix","result":[']
    for i, (metric, pieces) in enumerate(rows):
        out += [b',{"metric":' if i else b'{"metric":', metric, b',"values":[', b"".join(pieces)[:-1], b"]}"]
    out.append(b"]}")
    return b"".join(out)
