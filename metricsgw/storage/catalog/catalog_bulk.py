"""``Catalog.add_keys``: many series registered from their key bytes at once (start-up), with
numpy work per series and Python work per distinct label name and value only (keysplit.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ... import npsort
from ...model import METRIC_NAME
from .keysplit import split_keys
from .metric_table import Column, MetricTable

if TYPE_CHECKING:  # only its type: the catalog imports this module
    from .catalog import Catalog


def add_keys(cat: Catalog, sids: np.ndarray, keys: list[bytes]) -> np.ndarray:
    """Holding ``cat``'s lock. Returns the positions (into ``sids``) of the series that were not known."""
    _, first = npsort.unique_first(sids)
    first.sort()
    if cat.sids.n:
        first = first[~cat.known(sids[first])]
    n = len(first)
    if not n:
        return first
    split = split_keys(keys if n == len(keys) else [keys[i] for i in first.tolist()])
    is_name = np.zeros(len(split.names), bool)
    if METRIC_NAME in split.names:
        is_name[split.names.index(METRIC_NAME)] = True
    name_rows = is_name[split.name_codes]
    # metric of each series: the value of its __name__ label ("" if it has none)
    metric_of = np.full(n, -1, np.int64)
    metric_of[split.series[name_rows]] = split.value_codes[name_rows]
    metric_ids, metric_of = npsort.unique_inverse(metric_of)
    metric_names = [split.value(m) if m >= 0 else "" for m in metric_ids.tolist()]
    tables = []
    for name in metric_names:
        table = cat.metrics.get(name)
        if table is None:
            table = cat.metrics[name] = MetricTable(name, len(cat.tables))
            cat.tables.append(table)
        tables.append(table)
    # row of each series in its table: after the rows the table has, in input order
    by_metric = np.argsort(metric_of, kind="stable")
    counts = np.bincount(metric_of, minlength=len(tables))
    group_start = np.cumsum(counts) - counts
    row = np.empty(n, np.int64)
    row[by_metric] = np.arange(n) - np.repeat(group_start, counts)
    row += np.array([len(t) for t in tables], np.int64)[metric_of]
    # Label columns: pairs sorted once by (metric, label name, value), so each (metric, name)
    # group is a run, and so is each distinct value in it. Codes before row counts, as in add().
    keep = ~name_rows
    pair_series, pair_value = split.series[keep], split.value_codes[keep]
    nv = max(len(split.value_bytes), 1)
    key = (metric_of[pair_series] * len(split.names) + split.name_codes[keep]) * nv + pair_value
    order = np.argsort(key)
    key = key[order]
    new_value = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    group = key // nv
    bounds = np.flatnonzero(np.r_[True, group[1:] != group[:-1], True]) if len(key) else []
    for a, b in zip(bounds[:-1], bounds[1:]):
        g = int(group[a])
        table, name = tables[g // len(split.names)], split.names[g % len(split.names)]
        col = table.columns.get(name)
        if col is None:
            col = table.columns[name] = Column()
        starts = np.flatnonzero(new_value[a:b])
        col_codes = col.codes_of_encoded(split.value_bytes.take(pa.array(key[a:b][starts] % nv)))
        rows = row[pair_series[order[a:b]]]
        col.codes.pad_to(int(rows.max()) + 1)
        col.codes.a[rows] = col_codes[np.cumsum(new_value[a:b]) - 1]
    g0 = cat.sids.n
    fresh_sids = sids[first]
    cat.sids.extend(fresh_sids)
    cat.first_ms.extend(np.full(n, np.iinfo(np.int64).max, np.int64))
    cat.last_ms.extend(np.full(n, np.iinfo(np.int64).min, np.int64))
    cat.note_added(fresh_sids, g0)
    for m, table in enumerate(tables):
        table.gidx.extend(by_metric[group_start[m]:group_start[m] + counts[m]] + g0)
    cat.metric_idx.extend(np.array([t.index for t in tables], np.int32)[metric_of])
    return first
