"""Cardinality statistics over every stored series, in the shape of Prometheus's /api/v1/status/tsdb.

Computed from the dictionary-encoded series table: one ``bincount`` per (metric, label name)
column, so the cost is numpy work per series and Python work per distinct label value.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

import numpy as np

from ...model import METRIC_NAME
from .catalog import Catalog
from .metric_table import MetricTable


def _top(counter: Counter, limit: int) -> list[dict]:
    return [{"name": k, "value": int(v)} for k, v in heapq.nlargest(limit, counter.items(), key=lambda kv: (kv[1], kv[0]))]


def counts(catalog: Catalog, min_t: int | None, max_t: int | None) -> dict:
    """The figures of every series of the catalog, whole (not cut to the top N) so that the counts of
    processes holding disjoint series add up (``render`` of several: a gateway's shards, cluster/gateway_head.py).
    JSON-able: this is what a shard answers the front's head read of ``/api/v1/status/tsdb`` with."""
    whole = [(table, None) for table in list(catalog.metrics.values()) if len(table)]
    return counts_of(whole, len(catalog), min_t, max_t)


def counts_of(selected: Iterable[tuple[MetricTable, np.ndarray | None]], num_series: int | None,
              min_t: int | None, max_t: int | None) -> dict:
    """``counts`` of the given rows of each table (None: all of its rows); ``num_series`` None: their number."""
    series_by_metric: Counter = Counter()
    pairs: Counter = Counter()
    values_by_name: dict[str, set[str]] = {}
    memory: Counter = Counter()
    for table, rows in selected:
        n = len(table) if rows is None else len(rows)
        if not n:
            continue
        name = table.name
        series_by_metric[name] += n
        pairs[f"{METRIC_NAME}={name}"] += n
        memory[METRIC_NAME] += len(name) * n
        values_by_name.setdefault(METRIC_NAME, set()).add(name)
        for label, col in table.columns.items():
            codes = col.codes.view[:len(table)]
            if rows is not None:
                codes = codes[rows[rows < len(codes)]]
            counts_ = np.bincount(codes, minlength=len(col.values))
            seen = values_by_name.setdefault(label, set())
            for code in np.flatnonzero(counts_[1:]) + 1:
                value = col.values[code]
                c = int(counts_[code])
                pairs[f"{label}={value}"] += c
                memory[label] += len(value) * c
                seen.add(value)
    total = sum(series_by_metric.values()) if num_series is None else num_series
    return {"numSeries": total, "minTime": min_t, "maxTime": max_t,
            "seriesByMetric": dict(series_by_metric), "pairs": dict(pairs), "memory": dict(memory),
            "valuesByName": {k: sorted(v) for k, v in values_by_name.items()}}


def render(parts: list[dict], limit: int, focus_label: str | None = None) -> dict:
    """Prometheus's /api/v1/status/tsdb of the sum of ``counts`` parts (each its own series); with ``focus_label``
    also VictoriaMetrics' ``seriesCountByFocusLabelValue``: that label's values by series."""
    series_by_metric: Counter = Counter()
    pairs: Counter = Counter()
    memory: Counter = Counter()
    values_by_name: dict[str, set[str]] = {}
    for p in parts:
        series_by_metric.update(p["seriesByMetric"])
        pairs.update(p["pairs"])
        memory.update(p["memory"])
        for k, v in p["valuesByName"].items():
            values_by_name.setdefault(k, set()).update(v)
    mins = [p["minTime"] for p in parts if p["minTime"] is not None]
    maxs = [p["maxTime"] for p in parts if p["maxTime"] is not None]
    value_counts = Counter({k: len(v) for k, v in values_by_name.items()})
    out = {
        "headStats": {
            "numSeries": sum(p["numSeries"] for p in parts),
            "numLabelPairs": sum(value_counts.values()),
            "chunkCount": 0,
            "minTime": int(min(mins)) if mins else 0,
            "maxTime": int(max(maxs)) if maxs else 0,
        },
        "seriesCountByMetricName": _top(series_by_metric, limit),
        "labelValueCountByLabelName": _top(value_counts, limit),
        "memoryInBytesByLabelName": _top(memory, limit),
        "seriesCountByLabelValuePair": _top(pairs, limit),
    }
    if focus_label:
        prefix = f"{focus_label}="
        out["seriesCountByFocusLabelValue"] = _top(
            Counter({k[len(prefix):]: v for k, v in pairs.items() if k.startswith(prefix)}), limit)
    return out
