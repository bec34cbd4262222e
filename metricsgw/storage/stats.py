"""Cardinality statistics over every stored series, in the shape of Prometheus's /api/v1/status/tsdb.

Computed from the dictionary-encoded series table: one ``bincount`` per (metric, label name)
column, so the cost is numpy work per series and Python work per distinct label value.
"""

from __future__ import annotations

import heapq
from collections import Counter

import numpy as np

from ..model import METRIC_NAME
from .catalog import Catalog


def _top(counter: Counter, limit: int) -> list[dict]:
    return [{"name": k, "value": int(v)} for k, v in heapq.nlargest(limit, counter.items(), key=lambda kv: (kv[1], kv[0]))]


def tsdb_status(catalog: Catalog, limit: int, min_t: int | None, max_t: int | None) -> dict:
    series_by_metric: Counter = Counter()
    pairs: Counter = Counter()
    values_by_name: dict[str, set[str]] = {}
    memory: Counter = Counter()
    num_pairs = 0
    for name, table in list(catalog.metrics.items()):
        n = len(table)
        if not n:
            continue
        series_by_metric[name] = n
        pairs[f"{METRIC_NAME}={name}"] += n
        memory[METRIC_NAME] += len(name) * n
        values_by_name.setdefault(METRIC_NAME, set()).add(name)
        for label, col in table.columns.items():
            codes = col.codes.view[:n]
            counts = np.bincount(codes, minlength=len(col.values))
            seen = values_by_name.setdefault(label, set())
            for code in np.flatnonzero(counts[1:]) + 1:
                value = col.values[code]
                c = int(counts[code])
                pairs[f"{label}={value}"] += c
                memory[label] += len(value) * c
                seen.add(value)
    for label, values in values_by_name.items():
        num_pairs += len(values)
    value_counts = Counter({k: len(v) for k, v in values_by_name.items()})
    return {
        "headStats": {
            "numSeries": len(catalog),
            "numLabelPairs": num_pairs,
            "chunkCount": 0,
            "minTime": int(min_t) if min_t is not None else 0,
            "maxTime": int(max_t) if max_t is not None else 0,
        },
        "seriesCountByMetricName": _top(series_by_metric, limit),
        "labelValueCountByLabelName": _top(value_counts, limit),
        "memoryInBytesByLabelName": _top(memory, limit),
        "seriesCountByLabelValuePair": _top(pairs, limit),
    }
