"""Prometheus 3's native histogram notation in ``.test`` scripts (promql/parser/parse.go
buildHistogramFromMap): ``{{schema:0 sum:5 count:4 z_bucket:1 z_bucket_w:0.001 buckets:[1 2 1] offset:1
n_buckets:[...] n_offset:0 custom_values:[...] counter_reset_hint:gauge}}``, and the series expansions
``{{a}}xN`` (a repeated) and ``{{a}}+{{b}}xN`` / ``{{a}}-{{b}}xN`` (b added or subtracted step by step).

A histogram here is an ``NH``: buckets as {index: count}, one span per side as the notation gives them.
``blob`` makes the remote-write bytes the storage and MemSource hold; ``of`` reads a query's result back;
``equal`` is test.go's compareNativeHistogram on compacted histograms (every empty bucket dropped).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from metricsgw.model import STALE_NAN
from metricsgw.promql import native, native_math
from tests.native_requests import histogram_bytes
from tests.promql.promqltest import _num, almost_equal, expand_values

_FIELD = re.compile(r"(\w+):(\[[^\]]*\]|\S+)")
_TOKEN = re.compile(r"\{\{.*?\}\}(?:[+-]\{\{.*?\}\})?(?:x\d+)?|\S+")
_SERIES = re.compile(r"(\{\{.*?\}\})(?:([+-])(\{\{.*?\}\}))?(?:x(\d+))?$")
RESET_HINTS = {"unknown": 0, "reset": 1, "not_reset": 2, "gauge": 3}


@dataclass
class NH:
    schema: int = 0
    sum: float = 0.0
    count: float = 0.0
    zero_count: float = 0.0
    zero_threshold: float = 0.0
    pos: dict[int, float] = field(default_factory=dict)
    neg: dict[int, float] = field(default_factory=dict)
    custom_values: tuple[float, ...] = ()
    reset_hint: int = 0


def parse(text: str) -> NH:
    """One ``{{...}}``."""
    f = dict(_FIELD.findall(text.strip()[2:-2]))

    def nums(key: str) -> list[float]:
        return [_num(x) for x in f.get(key, "[]").strip("[]").split()]

    h = NH(int(f.get("schema", 0)), _num(f.get("sum", "0")), _num(f.get("count", "0")), _num(f.get("z_bucket", "0")),
           _num(f.get("z_bucket_w", "0")), custom_values=tuple(nums("custom_values")),
           reset_hint=RESET_HINTS[f.get("counter_reset_hint", "unknown")])
    h.pos = {int(f.get("offset", 0)) + i: c for i, c in enumerate(nums("buckets"))}
    h.neg = {int(f.get("n_offset", 0)) + i: c for i, c in enumerate(nums("n_buckets"))}
    return h


def _spans(d: dict[int, float]) -> list[tuple[int, int]]:
    return native.spans_of(sorted(d))


def blob(h: NH, t_ms: int, stale: bool = False) -> bytes:
    """The remote-write bytes of ``h`` (a float histogram); ``stale``: a stale marker."""
    return histogram_bytes({"count_float": h.count, "sum": STALE_NAN if stale else h.sum, "schema": h.schema,
                            "zero_threshold": h.zero_threshold, "zero_count_float": h.zero_count,
                            "positive_spans": _spans(h.pos), "positive_counts": [h.pos[i] for i in sorted(h.pos)],
                            "negative_spans": _spans(h.neg), "negative_counts": [h.neg[i] for i in sorted(h.neg)],
                            "custom_values": list(h.custom_values), "reset_hint": h.reset_hint, "timestamp": t_ms})


def of(fh: "native.FloatHistogram") -> NH:
    return NH(fh.schema, fh.sum, fh.count, fh.zero_count, fh.zero_threshold,
              dict(zip(native.bucket_indexes(fh.pos_spans), fh.pos)), dict(zip(native.bucket_indexes(fh.neg_spans), fh.neg)),
              tuple(fh.custom_values), fh.reset_hint)


def _combine(a: NH, b: NH, sign: float) -> NH:
    """a + b (sign 1) or a - b (-1), as FloatHistogram.Add/Sub: into the smaller schema."""
    if a.schema == native.CUSTOM_BUCKETS_SCHEMA or b.schema == native.CUSTOM_BUCKETS_SCHEMA:
        keys = sorted(set(a.pos) | set(b.pos))
        return NH(a.schema, a.sum + sign * b.sum, a.count + sign * b.count, 0.0, 0.0,
                  {k: a.pos.get(k, 0.0) + sign * b.pos.get(k, 0.0) for k in keys}, {}, a.custom_values, a.reset_hint)
    left = native_math.Hist(a.schema, a.zero_threshold, a.zero_count, a.count, a.sum, dict(sorted(a.pos.items())),
                            dict(sorted(a.neg.items())))
    right = native_math.Hist(b.schema, b.zero_threshold, b.zero_count, b.count, b.sum, dict(sorted(b.pos.items())),
                             dict(sorted(b.neg.items())))
    h = native_math.copy_to_schema(left, min(a.schema, b.schema))
    out = native_math.add(h, right, sign)
    return NH(out.schema, out.sum, out.count, out.zero_count, out.zero_threshold, out.pos, out.neg,
              reset_hint=a.reset_hint)  # a series' expansion keeps its counter reset hint


def expand(text: str) -> list:
    """A series' values: floats, NH, None (no sample) and the string "stale"."""
    out: list = []
    for tok in _TOKEN.findall(text):
        m = _SERIES.match(tok)
        if not m:
            out.extend("stale" if tok == "stale" else v for v in expand_values(tok))
            continue
        base, sign, inc, times = parse(m.group(1)), m.group(2), m.group(3), m.group(4)
        out.append(base)
        cur = base
        for _ in range(int(times or 0)):
            cur = _combine(cur, parse(inc), 1.0 if sign == "+" else -1.0) if inc else base
            out.append(cur)
    return out


def _buckets_equal(a: dict[int, float], b: dict[int, float]) -> bool:
    a = {k: v for k, v in a.items() if v != 0}
    b = {k: v for k, v in b.items() if v != 0}
    return a.keys() == b.keys() and all(almost_equal(a[k], b[k]) for k in a)


def equal(want: NH, got: NH) -> bool:
    return (want.schema == got.schema and almost_equal(want.count, got.count) and almost_equal(want.sum, got.sum)
            and (want.schema != native.CUSTOM_BUCKETS_SCHEMA or want.custom_values == got.custom_values)
            and want.zero_threshold == got.zero_threshold and almost_equal(want.zero_count, got.zero_count)
            and _buckets_equal(want.pos, got.pos) and _buckets_equal(want.neg, got.neg))


def show(v) -> str:
    if isinstance(v, NH):
        return (f"{{{{schema:{v.schema} count:{v.count:g} sum:{v.sum:g} z:{v.zero_count:g}/{v.zero_threshold:g} "
                f"+{ {k: c for k, c in v.pos.items() if c} } -{ {k: c for k, c in v.neg.items() if c} }}}}}")
    return "NaN" if isinstance(v, float) and math.isnan(v) else repr(v)
