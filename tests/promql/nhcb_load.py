"""``load_with_nhcb`` of Prometheus 3's promqltest: the classic histograms of a load are also stored as
native histograms with custom buckets (schema -53), one series per histogram under its base name (the
``_bucket``/``_sum``/``_count`` suffix and ``le`` dropped), as promqltest's appendCustomHistogram does with
util/convertnhcb: buckets by ``le`` (a repeated bound counts once, a NaN bound is left out), the count from
``_count`` or else the highest bucket, a ``+Inf`` bucket added with that count when there is none."""

from __future__ import annotations

import math

from metricsgw.promql.native import CUSTOM_BUCKETS_SCHEMA
from tests.promql.histogram_notation import NH

_SUFFIXES = ("_bucket", "_sum", "_count")


def _base(labels: tuple) -> tuple[str, tuple] | None:
    """(suffix, base labels) of a classic histogram's series, or None."""
    d = dict(labels)
    name = d.get("__name__", "")
    suffix = next((s for s in _SUFFIXES if name.endswith(s)), None)
    if suffix is None:
        return None
    d["__name__"] = name[: -len(suffix)]
    d.pop("le", None)
    return suffix, tuple(sorted(d.items()))


def histograms(series: list[tuple[tuple, list]]) -> list[tuple[tuple, list[tuple[int, NH]]]]:
    """``series``: (labels, [(slot, float)]) of one load; the NHCB series they make: (labels, [(slot, NH)])."""
    parts: dict[tuple, dict[int, dict]] = {}
    for labels, points in series:
        got = _base(labels)
        if got is None:
            continue
        suffix, base = got
        le = _bound(dict(labels).get("le")) if suffix == "_bucket" else None
        if suffix == "_bucket" and (le is None or math.isnan(le)):
            continue
        for slot, v in points:
            p = parts.setdefault(base, {}).setdefault(slot, {"buckets": {}})
            if suffix == "_bucket":
                p["buckets"].setdefault(le, v)
            else:
                p[suffix] = v
    return [(base, [(slot, _convert(p)) for slot, p in sorted(by_slot.items())]) for base, by_slot in parts.items()]


def _bound(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _convert(p: dict) -> NH:
    bounds = sorted(p["buckets"])
    cumulative = [p["buckets"][b] for b in bounds]
    count = p.get("_count", cumulative[-1] if cumulative else 0.0)
    if not bounds or bounds[-1] != math.inf:
        bounds.append(math.inf)
        cumulative.append(count)
    counts = [c - prev for c, prev in zip(cumulative, [0.0] + cumulative[:-1])]
    return NH(CUSTOM_BUCKETS_SCHEMA, p.get("_sum", 0.0), count, pos=dict(enumerate(counts)),
              custom_values=tuple(bounds[:-1]))
