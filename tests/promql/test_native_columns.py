"""rate/increase/delta over stored histograms of one layout as matrix rows (native_columns.py) answer bit for bit
what native_math's bucket dicts answer, annotations included: the same random histograms queried both ways."""

from __future__ import annotations

import numpy as np
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.promql import native_columns
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource
from metricsgw.promql.render import render
from tests.native_requests import histogram_bytes

STEP_MS = 15_000
SAMPLES = 60


def _series_histograms(rng: np.random.Generator, kind: str) -> list[dict]:
    """A series' histograms over time: counters growing (with resets, layouts growing, empty buckets) or gauges."""
    custom = kind == "custom"
    schema = -53 if custom else int(rng.integers(-1, 4))
    zero_threshold = 0.0 if custom else (0.3 if kind == "inside_zero" else 1e-128)
    n_pos = int(rng.integers(2, 9))
    n_neg = 0 if custom else int(rng.integers(0, 3))
    counts = rng.integers(0, 4, n_pos + n_neg).astype(np.int64)
    zero = int(rng.integers(0, 3))
    as_float = kind == "float" or (kind == "mixed" and rng.random() < 0.5)
    out = []
    for k in range(SAMPLES):
        if kind != "gauge" and rng.random() < 0.06:  # a counter reset
            counts = rng.integers(0, 2, len(counts)).astype(np.int64)
            zero = 0
        elif rng.random() < 0.05 and not custom:  # the layout grows a bucket
            counts = np.append(counts, 0)
            n_pos += 1
        else:
            step = rng.integers(-2 if kind == "gauge" else 0, 4, len(counts))
            counts = np.maximum(counts + step * (rng.random(len(counts)) < 0.7), 0)
            zero += int(rng.integers(0, 2))
        if kind == "mixed" and rng.random() < 0.1:
            as_float = not as_float
        pos, neg = counts[:n_pos], counts[n_pos:]
        first = -2 if not custom else 0
        h = {"schema": schema, "zero_threshold": zero_threshold, "sum": float(rng.normal(100, 30)),
             "positive_spans": [(first, 2), (1, n_pos - 2)] if n_pos > 2 else [(first, n_pos)],
             "timestamp": k * STEP_MS}
        if n_neg:
            h["negative_spans"] = [(0, n_neg)]
        if custom:
            h["custom_values"] = [0.1 * (i + 1) for i in range(n_pos - 1)]
        total = int(counts.sum()) + (0 if custom else zero)
        if as_float:
            h |= {"count_float": float(total) + 0.25, "positive_counts": [float(c) + 0.125 for c in pos]}
            if n_neg:
                h["negative_counts"] = [float(c) / 3 for c in neg]
            h["zero_count_float"] = float(zero)  # (a custom-bucket histogram has none; native_math keeps the last's)
        else:
            h |= {"count_int": total, "positive_deltas": np.diff(pos, prepend=0).tolist()}
            if n_neg:
                h["negative_deltas"] = np.diff(neg, prepend=0).tolist()
            h["zero_count_int"] = zero
        if kind == "gauge":
            h["reset_hint"] = 3
        out.append(h)
    return out


@pytest.fixture(scope="module")
def source() -> MemSource:
    rng = np.random.default_rng(7)
    src = MemSource()
    kinds = ["int", "int", "float", "mixed", "custom", "inside_zero", "gauge"]
    for i in range(28):
        kind = kinds[i % len(kinds)]
        hs = _series_histograms(rng, kind)
        keep = rng.random(len(hs)) > 0.1  # gaps: windows of 0, 1 or several samples
        src.add_histograms({"__name__": "nh", "i": str(i), "g": str(i % 3), "kind": kind},
                           [h["timestamp"] for h, k in zip(hs, keep) if k],
                           [histogram_bytes(h) for h, k in zip(hs, keep) if k])
    return src


QUERIES = ["rate(nh[1m])", "increase(nh[2m])", "delta(nh[90s])", "sum by (g) (rate(nh{kind!=\"custom\"}[5m]))",
           'sum(increase(nh{kind="custom"}[5m]))',
           "histogram_count(increase(nh[3m]))", 'rate(nh{kind="custom"}[2m]) * 2',
           "rate(nh[5m:30s])"]


def _answer(source: MemSource, query: str, compat: int) -> tuple[dict, set, set]:
    ctx = QueryContext()
    value = Engine(source, promql_compat=compat).range(query, 0, SAMPLES * STEP_MS / 1000, 20, ctx)
    return render(value), set(ctx.warnings), set(ctx.infos)


@pytest.mark.parametrize("compat", [2, 3])
@pytest.mark.parametrize("query", QUERIES)
def test_the_matrix_path_answers_as_the_bucket_dicts(source, query, compat, monkeypatch):
    uniform = native_columns.WindowRates.uniform
    taken = []

    def counted(self, lo, hi):
        got = uniform(self, lo, hi)
        taken.append(int(got.sum()))
        return got

    monkeypatch.setattr(native_columns.WindowRates, "uniform", counted)
    fast = _answer(source, query, compat)
    monkeypatch.setattr(native_columns.WindowRates, "uniform", lambda self, lo, hi: np.zeros(len(lo), bool))
    slow = _answer(source, query, compat)
    assert fast == slow
    assert sum(taken) > 0
    assert fast[0]["result"]


def test_plain_layouts():
    plain = native_columns.Layout(0, 1e-128, ((-2, 3),), (), ())
    assert plain.plain()
    # bucket -1 of schema 0 ends at 0.5, inside a zero bucket of threshold 0.5: native_math's path
    assert not native_columns.Layout(0, 0.5, ((-1, 3),), (), ()).plain()
    assert native_columns.Layout(-53, 0.0, ((0, 3),), (), (0.1, 0.2)).plain()
    assert not native_columns.Layout(-53, 0.0, ((0, 3),), ((0, 1),), (0.1, 0.2)).plain()
