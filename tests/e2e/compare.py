"""Compare two Prometheus API query results: same label sets, same timestamps, values equal
within a relative 1e-9 (NaN equals NaN); native histogram points (JSON "histogram" /
"histograms") must be equal exactly: count, sum and every bucket's bounds and count."""

from __future__ import annotations

import math


def _value(s: str) -> float:
    return float(s)


def _close(a, b) -> bool:
    if not isinstance(a, str) or not isinstance(b, str):  # a histogram (a dict): exact
        return a == b
    x, y = _value(a), _value(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y))


def _key(metric: dict) -> tuple:
    return tuple(sorted(metric.items()))


def normalise(data: dict) -> tuple[str, dict]:
    kind, result = data["resultType"], data["result"]
    if kind in ("scalar", "string"):
        return kind, {(): [tuple(result)]}
    if kind == "vector":
        return kind, {_key(r["metric"]): [tuple(r["value"] if "value" in r else r["histogram"])] for r in result}
    return kind, {_key(r["metric"]): [tuple(p) for p in r.get("values", []) + r.get("histograms", [])]
                  for r in result}


def diff(got: dict, want: dict, limit: int = 5) -> list[str]:
    """Differences between two `data` objects; empty when equal."""
    gk, g = normalise(got)
    wk, w = normalise(want)
    if gk != wk:
        return [f"resultType {gk} != {wk}"]
    out = []
    for k in sorted(set(g) | set(w), key=str):
        if k not in g:
            out.append(f"missing series {dict(k)}")
        elif k not in w:
            out.append(f"extra series {dict(k)}")
        else:
            gp, wp = g[k], w[k]
            if [round(float(t), 3) for t, _ in gp] != [round(float(t), 3) for t, _ in wp]:
                out.append(f"{dict(k)}: timestamps {[t for t, _ in gp][:5]}... != {[t for t, _ in wp][:5]}...")
            elif not all(_close(a, b) for (_, a), (_, b) in zip(gp, wp)):
                bad = [(t, a, b) for (t, a), (_, b) in zip(gp, wp) if not _close(a, b)]
                out.append(f"{dict(k)}: values differ at {bad[:3]}")
        if len(out) >= limit:
            break
    return out
