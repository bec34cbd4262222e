"""The sample-read planner (storage/read/plan.py) on plain values: which files and heads a read takes, and for each
metric whether it comes from the sample cache (filled first or not), a window scan or a join. No DuckDB, no file:
tests/storage/read/test_read_paths.py checks that every way gives the same samples on real files."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metricsgw.storage.files.parquet_io import SampleFile
from metricsgw.storage.read.plan import ReadPlan, Way, plan_read

HOUR = 3600_000
INTERVAL = 15_000.0
MB = 1 << 20


@dataclass
class Metric:
    name: str
    series: int

    def __len__(self) -> int:
        return self.series


def _file(seq: int, lo: int, hi: int) -> SampleFile:
    return SampleFile(f"/t/part-w-{seq:08d}.parquet", (lo // HOUR) * HOUR, seq, lo, hi, "w")


# Two hour files, written out of order, and one from yesterday.
FILES = (_file(7, HOUR, 2 * HOUR - 1), _file(3, 0, HOUR - 1), _file(1, -24 * HOUR, -23 * HOUR))
PER_SERIES = 2 * ((HOUR - 1) / INTERVAL + 1)  # a series' samples in the two hour files, from their spans


# Ids are hashes spread over the whole int64 range (model.series_id): two far apart, and a metric's ids evenly spaced.
FAR = [-(2 ** 62), 2 ** 62]
FAR_TOO = [-(2 ** 62) + 1, 2 ** 62]


def _even_ids(series: int) -> np.ndarray:
    """The ids of a metric of ``series`` series, as evenly spread as hashes are on average."""
    return (np.arange(series, dtype=np.float64) * (2 ** 64 / series) - 2 ** 63).astype(np.int64)


def _plan(ids, metric_of, metrics, start, end, *, files=FILES, heads=(), cache=(), cache_bytes=64 * MB,
          snapshot_version=1, cache_version=1, scan_series=0) -> ReadPlan:
    return plan_read(np.asarray(ids, np.int64), np.asarray(metric_of, np.int32), metrics, start, end,
                     files=files, heads=heads, snapshot_version=snapshot_version, cache_version=cache_version,
                     cache=set(cache), cache_max_bytes=cache_bytes, interval_ms=INTERVAL, scan_series=scan_series)


def test_files_in_the_window_in_write_order_and_heads_that_meet_it():
    heads = [(2 * HOUR, 2 * HOUR + 60_000), (2 * HOUR + 60_001, 2 * HOUR + 120_000)]
    plan = _plan([1, 2], [0, 0], [Metric("m", 2)], 0, 2 * HOUR + 1000, heads=heads)
    assert plan.files == (FILES[1].path, FILES[0].path)  # by seq, yesterday's file left out
    assert plan.heads == (0,)
    assert plan.trim_cache_to is None  # the cache was trimmed to this snapshot already


def test_no_file_in_the_window_reads_only_the_heads():
    plan = _plan([1, 2], [0, 0], [Metric("m", 2)], 3 * HOUR, 4 * HOUR, heads=[(3 * HOUR, 3 * HOUR + 10)])
    assert plan == ReadPlan((), (), (0,), None)
    assert _plan([], [], [], 0, HOUR).metrics == ()  # no series the catalog holds: no file either


def test_a_newer_snapshot_trims_the_cache_to_its_files():
    plan = _plan([1], [0], [Metric("m", 1)], 0, HOUR, snapshot_version=5, cache_version=4)
    assert plan.trim_cache_to == frozenset(f.path for f in FILES)


def test_reads_grouped_by_metric_each_with_its_series_ascending():
    plan = _plan([1, 2, 3, 4, 5], [1, 0, 1, 0, 1], [Metric("a", 2), Metric("b", 3)], 0, 2 * HOUR)
    assert [(r.metric, r.ids.tolist()) for r in plan.metrics] == [("a", [2, 4]), ("b", [1, 3, 5])]


def test_a_small_metric_is_filled_whole_into_the_cache_when_the_window_is_wide():
    plan = _plan([1], [0], [Metric("m", 100)], 0, 2 * HOUR)
    (r,) = plan.metrics
    assert (r.way, r.key, r.whole, r.fallback) == (Way.CACHE, "*", True, Way.WINDOW)  # one id: a scan of it alone
    assert r.fill_samples == int(100 * PER_SERIES)  # every series of both files


def test_everything_cached_reads_the_cache_with_no_budget_check():
    cache = {(FILES[0].path, "m", "*"), (FILES[1].path, "m", "*")}
    (r,) = _plan([1], [0], [Metric("m", 100)], HOUR - 60_000, HOUR + 60_000, cache=cache).metrics
    assert (r.way, r.fallback) == (Way.CACHE, None)  # a narrow window: cached entries serve it anyway
    (r,) = _plan(FAR, [0, 0], [Metric("m", 100)], HOUR - 60_000, HOUR + 60_000, cache=list(cache)[:1]).metrics
    assert r.way is Way.JOIN  # one file missing, and too narrow a window to fill it


def test_a_big_metric_wanted_nearly_whole_is_scanned_over_the_window():
    big = [Metric("big", 200_000)]
    ids = np.arange(150_000)
    (r,) = _plan(ids, np.zeros(len(ids)), big, 0, 2 * HOUR).metrics  # too big for a 64 MiB cache's entries
    assert (r.way, r.key, r.whole) == (Way.WINDOW, "*", True)


def test_a_few_series_of_a_big_metric_are_joined_or_cached_by_their_digest():
    big = [Metric("big", 200_000)]
    (r,) = _plan(FAR, [0, 0], big, HOUR - 60_000, HOUR + 60_000).metrics  # narrow: no fill
    assert (r.way, r.whole) == (Way.JOIN, False) and len(r.key) == 32
    (wide,) = _plan(FAR, [0, 0], big, 0, 2 * HOUR).metrics
    assert (wide.way, wide.key, wide.fallback) == (Way.CACHE, r.key, Way.JOIN)  # the panel's own entry
    assert wide.fill_samples == int(2 * PER_SERIES)
    (other,) = _plan(FAR_TOO, [0, 0], big, 0, 2 * HOUR).metrics
    assert other.key != r.key


def test_a_fill_whose_entries_would_not_stay_in_the_cache_is_not_made():
    # 1,000 series x 241 samples an hour file x 12 bytes = 2.9 MB an entry: kept by a 16 MiB cache, not by 8 MiB
    m = [Metric("m", 1000)]
    ids = np.arange(600)
    assert _plan(ids, np.zeros(600), m, 0, 2 * HOUR, cache_bytes=16 * MB).metrics[0].way is Way.CACHE
    (r,) = _plan(ids, np.zeros(600), m, 0, 2 * HOUR, cache_bytes=8 * MB).metrics
    assert r.way is Way.WINDOW  # most of it wanted: a scan, no join


def test_series_adjacent_by_id_are_scanned_over_their_id_range_and_spread_ones_joined():
    # a batch of 7,800 adjacent series of a 375k-series metric (promql/batching.py cuts batches by id)
    every = _even_ids(375_000)
    big = [Metric("big", 375_000)]
    (r,) = _plan(every[100_000:107_800], np.zeros(7_800), big, HOUR - 60_000, HOUR + 60_000).metrics
    assert (r.way, r.whole) == (Way.WINDOW, False)
    # as many series spread over the metric: a scan of their range would read nearly all of it
    (r,) = _plan(every[::48][:7_800], np.zeros(7_800), big, HOUR - 60_000, HOUR + 60_000).metrics
    assert r.way is Way.JOIN
    # one in three of a range's series: the join still
    (r,) = _plan(every[100_000:123_400:3], np.zeros(7_800), big, HOUR - 60_000, HOUR + 60_000).metrics
    assert r.way is Way.JOIN


def test_a_batch_fills_the_cache_only_when_the_whole_selection_would_stay_there():
    # 1,000 series x 241 samples an hour file x 12 bytes = 2.9 MB an entry; both hour files' entries, 5.8 MB
    every = _even_ids(100_000)
    m = [Metric("m", 100_000)]
    batch = every[:1000]
    (alone,) = _plan(batch, np.zeros(1000), m, 0, 2 * HOUR, cache_bytes=16 * MB).metrics
    assert (alone.way, alone.fallback) == (Way.CACHE, Way.WINDOW)
    (small,) = _plan(batch, np.zeros(1000), m, 0, 2 * HOUR, cache_bytes=16 * MB, scan_series=1000).metrics
    assert small.way is Way.CACHE  # the selection is this batch: its entries stay
    # one batch of 10 of a selection whose entries (58 MB, as much again merged) would not stay: no fill,
    # which the next batch would evict
    (part,) = _plan(batch, np.zeros(1000), m, 0, 2 * HOUR, cache_bytes=16 * MB, scan_series=10_000).metrics
    assert (part.way, part.fallback) == (Way.WINDOW, None)
