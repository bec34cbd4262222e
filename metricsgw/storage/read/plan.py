"""The sample-read planner: which sources a read of some series over [start_ms, end_ms] takes, and how.

``plan_read`` is a pure function of plain values (the pinned snapshot's sample files, the heads' time spans, the
catalog's metric of each wanted series, what the sample cache holds, the cache's size and the scrape interval), so
every decision of the read path can be tested without DuckDB or a file; ``querier.SampleQuerier`` executes the plan.

A metric's rows in the window's files are read one of three ways:
- ``CACHE``: from the sample cache (decoded per file, merged across the files once per snapshot), filling the
  cache first from whole files where it misses them;
- ``WINDOW``: a scan of the metric's rows in the window between the lowest and highest wanted id, no join: the wanted
  series are most of the metric's in that id range (the metric wanted nearly whole, or one batch of adjacent ids of
  it, promql/batching.py), so the scan returns few rows besides theirs, in the files' own order (nothing to sort);
- ``JOIN``: a join with the wanted sids (a few series spread over a big metric); every such metric goes in one query.

A read that is one batch of a query evaluated in series batches says how many series the whole selection has
(``scan_series``): a cache fill is made only when the whole selection's entries would stay in the cache. Otherwise
each batch's fill evicts the one before and none is ever read again (a refresh of a 375k-series panel filled and
threw away ~48 entries and their merged copies, sorting each).

One decision is left to the moment of reading: whether the query's budgets can hold a cache fill (a query
evaluated in series batches asks for a small part of a big metric). Earlier reads of the same call charge the
budget, so it cannot be known when planning; a fill names what it needs and the way to take instead.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ... import npsort
from .sample_cache import CACHED_SAMPLE_BYTES

# A query that wants at least this share of a metric's series, or any part of a metric small
# enough (1/16 of the cache), caches the whole metric per file; otherwise it caches just
# the series it wants (a dashboard panel asks for the same ones on every refresh).
WHOLE_METRIC_SHARE = 0.5
# Filling the cache reads whole files; worth it (and fair to the sample budget) only when the
# query window covers at least this share of them, or everything is cached already.
MIN_WINDOW_SHARE = 0.25
# A fill is made only when each file's entry would stay in the cache (SampleCache keeps no entry over a quarter).
FILL_SHARE = 4
# ... and a metric small enough for this share of the cache is cached whole, whatever part of it is wanted.
SMALL_METRIC_SHARE = 16
# The entries of a whole batched selection, and their files' entries merged (as many bytes again), must fit the cache.
SCAN_SHARE = 2
# Series ids are 64-bit hashes of the label sets (model.series_id), spread evenly over their range: a metric of n
# series has about n * (hi - lo + 1) / 2**64 of them between the ids lo and hi.
ID_SPACE = 2 ** 64


class Way(enum.Enum):
    CACHE = "cache"
    WINDOW = "window"
    JOIN = "join"


class SampleFileInfo(Protocol):
    """What the planner reads of a snapshot's sample file (storage/files/table.py ``SampleFile``)."""
    path: str
    seq: int
    min_t: int
    max_t: int


class MetricInfo(Protocol):
    """What the planner reads of a metric of the catalog (storage/catalog/metric_table.py ``MetricTable``)."""
    name: str

    def __len__(self) -> int:  # the metric's series
        ...


@dataclass(frozen=True, eq=False)  # holds an array: compared by identity
class MetricRead:
    """How one metric's wanted series are read from the plan's files."""

    metric: str
    ids: np.ndarray  # the wanted series of the metric, ascending
    way: Way
    key: str  # the cache entries' key: "*" (the whole metric) or a digest of ``ids``
    whole: bool  # a cache fill reads every series of the metric (else just ``ids``)
    # A CACHE read that has files to fill: the samples the query must be able to hold for the fill, and the
    # way to take when it cannot. None when everything is cached (or the way is not CACHE): no budget check.
    fallback: Way | None = None
    fill_samples: int = 0


@dataclass(frozen=True)
class ReadPlan:
    files: tuple[str, ...]  # paths of the snapshot's sample files the window touches, in write order (seq)
    metrics: tuple[MetricRead, ...]  # by metric index in the catalog; empty when no file is read
    heads: tuple[int, ...]  # positions of the heads whose span meets the window, oldest first
    trim_cache_to: frozenset[str] | None  # the snapshot's sample files, when the cache should drop the others


def plan_read(ids: np.ndarray, metric_of: np.ndarray, metrics: Sequence[MetricInfo], start_ms: int, end_ms: int,
              *, files: Sequence[SampleFileInfo], heads: Sequence[tuple[int, int]], snapshot_version: int,
              cache_version: int, cache: Container[tuple], cache_max_bytes: int, interval_ms: float,
              scan_series: int = 0) -> ReadPlan:
    """The plan of a read of ``ids`` (ascending, unique, every one held by the catalog; ``metric_of[i]`` the
    index in ``metrics`` of ``ids[i]``'s metric) over [start_ms, end_ms].

    ``files``: the pinned snapshot's sample files; ``heads``: (min_t, max_t) of each head, oldest first;
    ``snapshot_version``/``cache_version``: the snapshot's generation and the one the cache was last trimmed to;
    ``cache``: answers ``(path, metric, key) in cache``; ``interval_ms``: the scrape interval flushes saw;
    ``scan_series``: the series of the whole selection when this read is one batch of it (0 when it is not)."""
    in_heads = tuple(i for i, (lo, hi) in enumerate(heads) if lo <= end_ms and hi >= start_ms)
    chosen = sorted((f for f in files if f.max_t >= start_ms and f.min_t <= end_ms), key=lambda f: f.seq)
    if not chosen or not len(ids):
        return ReadPlan((), (), in_heads, None)
    trim = frozenset(f.path for f in files) if snapshot_version > cache_version else None
    paths = tuple(f.path for f in chosen)
    # Samples per series in each file (from its time span) size a cache fill; a fill that
    # could not stay in the cache is never made, so big selections read only their window.
    spans = [(f.max_t - f.min_t) / interval_ms + 1 for f in chosen]
    per_series, per_series_file = sum(spans), max(spans)
    wide = (end_ms - start_ms + 1) >= MIN_WINDOW_SHARE * sum(f.max_t - f.min_t + 1 for f in chosen)
    reads = []
    for ti in npsort.unique(metric_of).tolist():  # per metric, never per sample
        metric = metrics[ti]
        series = len(metric)
        ids_m = ids[metric_of == ti]
        most = len(ids_m) >= WHOLE_METRIC_SHARE * series
        whole = most or CACHED_SAMPLE_BYTES * series * per_series <= cache_max_bytes // SMALL_METRIC_SHARE
        key = "*" if whole else hashlib.blake2b(ids_m.tobytes(), digest_size=16).hexdigest()
        rows = series if whole else len(ids_m)
        scan_rows = series if whole else max(rows, scan_series)  # what the selection's fills would cache in all
        instead = Way.WINDOW if _dense(ids_m, series) else Way.JOIN
        if all((p, metric.name, key) in cache for p in paths):
            reads.append(MetricRead(metric.name, ids_m, Way.CACHE, key, whole))
        elif (wide and CACHED_SAMPLE_BYTES * rows * per_series_file <= cache_max_bytes // FILL_SHARE
              and CACHED_SAMPLE_BYTES * scan_rows * per_series <= cache_max_bytes // SCAN_SHARE):
            reads.append(MetricRead(metric.name, ids_m, Way.CACHE, key, whole, instead, int(rows * per_series)))
        else:
            reads.append(MetricRead(metric.name, ids_m, instead, key, whole))
    return ReadPlan(paths, tuple(reads), in_heads, trim)


def _dense(ids_m: np.ndarray, series: int) -> bool:
    """Whether the wanted ids (ascending) are at least ``WHOLE_METRIC_SHARE`` of the metric's series in their id range
    (about: ids are spread evenly), so a scan of that range costs little more than a join and keeps file order."""
    in_range = series * (int(ids_m[-1]) - int(ids_m[0]) + 1) / ID_SPACE
    return len(ids_m) >= WHOLE_METRIC_SHARE * min(series, in_range)
