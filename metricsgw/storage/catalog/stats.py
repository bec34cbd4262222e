"""Cardinality statistics over every stored series, in the shape of Prometheus's /api/v1/status/tsdb.

Computed from the dictionary-encoded series table: one ``bincount`` per (metric, label name)
column, summed across metrics by value ids kept between counts (value_ids.py), so the cost is numpy work per
series and Python work per distinct label value of the answer only.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

import numpy as np

from ...model import METRIC_NAME
from .catalog import Catalog
from .metric_table import MetricTable
from .value_ids import ValueIds

_IDS = ValueIds()  # shared by every catalog of the process (value_ids.py)


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
    """``counts`` of the given rows of each table (None: all of its rows); ``num_series`` None: their number.

    Per column, one ``bincount`` of its codes; per label name, the counts of every metric's column are summed
    by value ids kept between calls (value_ids.py), so Python touches only the values in the answer: at 2.7M
    series a per-value loop took ~3 s."""
    series_by_metric: Counter = Counter()
    sums: dict[str, np.ndarray] = {}  # label -> series per value id
    spaces: dict = {}  # label -> its value ids (value_ids.py), one for the whole count
    for table, rows in selected:
        n = len(table) if rows is None else len(rows)
        if not n:
            continue
        series_by_metric[table.name] += n
        for label, col in table.columns.items():
            codes = col.codes.view[:len(table)]
            if rows is not None:
                codes = codes[rows[rows < len(codes)]]
            counts_ = np.bincount(codes)
            counts_[:1] = 0  # code 0 is the empty value: the series lacks the label
            space = spaces.get(label) or spaces.setdefault(label, _IDS.space(label))
            ids = _IDS.ids(space, col)[:len(counts_)]  # after the codes: a value is added before its code
            total = sums.get(label)
            if total is None or len(total) < len(space.values):
                grown = np.zeros(len(space.values), np.int64)
                if total is not None:
                    grown[:len(total)] = total
                sums[label] = total = grown
            total[ids] += counts_  # a column's values are distinct, so their ids are: no index repeats
    pairs: dict[str, int] = {f"{METRIC_NAME}={k}": v for k, v in series_by_metric.items()}
    memory: dict[str, int] = {METRIC_NAME: sum(len(k) * v for k, v in series_by_metric.items())}
    values_by_name: dict[str, list[str]] = {METRIC_NAME: sorted(series_by_metric)} if series_by_metric else {}
    for label, total in sums.items():
        used = np.flatnonzero(total)
        values, counts_ = [spaces[label].values[i] for i in used.tolist()], total[used]
        _IDS.settle(label, spaces[label], len(used))
        if not values:
            continue
        memory[label] = int(np.fromiter(map(len, values), np.int64, len(values)) @ counts_)
        pairs.update(zip([f"{label}={v}" for v in values], counts_.tolist()))
        values_by_name[label] = sorted(values)
    total_series = sum(series_by_metric.values()) if num_series is None else num_series
    return {"numSeries": total_series, "minTime": min_t, "maxTime": max_t,
            "seriesByMetric": dict(series_by_metric), "pairs": pairs, "memory": memory,
            "valuesByName": values_by_name}


def ids_nbytes() -> int:
    """What the value ids kept between counts hold (metricsgw_memory_bytes{part="cardinality_ids"})."""
    return _IDS.nbytes()


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
