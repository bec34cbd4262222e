"""Compare two Prometheus API query results: same label sets, same timestamps, values equal
within a relative 1e-9 (NaN equals NaN); native histogram points (JSON "histogram" /
"histograms") must be equal exactly: count, sum and every bucket's bounds and count."""

from __future__ import annotations

import math

from tests.e2e import queries
from tests.e2e.client import api


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


def compare_servers(got_url: str, want_url: str, path: str, params: dict, ordered: bool,
                    want_name: str = "Prometheus", got_name: str = "metricsgw") -> list[str]:
    """Differences between two servers' answers to one API call (empty when they agree): see compare_answers."""
    want = api(want_url, path, params, method="POST")
    got = api(got_url, path, params, method="POST")
    return compare_answers(got, want, path, params, ordered, want_name, got_name)


def compare_answers(got: tuple[int, dict], want: tuple[int, dict], path: str, params: dict, ordered: bool,
                    want_name: str = "Prometheus", got_name: str = "metricsgw") -> list[str]:
    """Differences between two (status, body) answers to one API call (empty when they agree): where the
    reference refuses, the other must refuse with the same status and errorType; topk/bottomk may
    pick other series of equal value; a sorted vector must come in the same value order."""
    (s_got, got), (s_want, want) = got, want
    where = f"{path} {params}"
    if s_want != 200:
        if (s_got, got.get("errorType")) != (s_want, want.get("errorType")):
            return [f"{where}: {want_name} {s_want} {want.get('errorType')} ({want.get('error')}) "
                    f"but {got_name} {s_got} {got.get('errorType')} ({got.get('error') or got})"]
        return []
    if s_got != 200 or got.get("status") != "success":
        return [f"{where}: {want_name} answered, {got_name} {s_got} {got}"]
    if want["data"]["resultType"] == "string":  # compare.diff reads values as floats
        return [] if got["data"] == want["data"] else [f"{where}: {got['data']} != {want['data']}"]
    problems = diff(got["data"], want["data"])
    if problems and queries.tie_sensitive(params["query"]) and \
            values_by_time(got["data"]) == values_by_time(want["data"]):
        problems = []  # topk/bottomk chose other series of equal value: Prometheus's choice follows its series order
    if not problems and ordered and want["data"]["resultType"] == "vector":
        # sort() does not order ties (Go's sort.Sort is not stable): the values must come in the same order
        g, w = value_seq(got["data"]), value_seq(want["data"])
        if len(g) != len(w) or not all(same_value(a, b) for a, b in zip(g, w)):
            problems = [f"order differs: want values {w}, got {g}"]
    return [f"{where}: {p}" for p in problems]


def value_seq(data: dict) -> list[float]:
    return [float(r["value"][1]) for r in data["result"]]


def same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def values_by_time(data: dict) -> dict:
    """timestamp -> sorted values of all series at it (a tie-blind view of a result)."""
    out: dict = {}
    points = [r["value"] for r in data["result"]] if data["resultType"] == "vector" else \
        [p for r in data["result"] for p in r["values"]] if data["resultType"] == "matrix" else []
    for t, v in points:
        out.setdefault(round(float(t), 3), []).append(repr(float(v)))
    return {t: sorted(vs) for t, vs in out.items()}
