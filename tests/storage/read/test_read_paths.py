"""Every way read_samples can get a file's rows gives the same samples: from the cache, by a
whole-metric window scan (a metric too big to cache, wanted nearly whole) and by a join
(a few series of a big metric), across several files and the head."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher, canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.store import Storage

HOUR = 3600_000
SERIES, STEPS = 2000, 400  # 100 scrapes a file: 4.8 MB as sid/t/v, above a 64 MiB store's 2 MiB cache entries


def _labels(i: int):
    return canonical([("__name__", "big"), ("i", str(i))])


def _load(tmp_path, sample_cache_bytes: int = 128 << 20) -> tuple[Storage, dict[int, list[tuple[int, float]]], int]:
    st = Storage(str(tmp_path), duckdb_memory_limit=64 << 20, sample_cache_bytes=sample_cache_bytes)
    st.open()
    base = (1_700_000_000_000 // HOUR) * HOUR
    lbs = [_labels(i) for i in range(SERIES)]
    sids = np.array([series_id(lb) for lb in lbs], np.int64)
    truth: dict[int, list[tuple[int, float]]] = {int(s): [] for s in sids}
    rng = np.random.default_rng(5)
    for k0 in range(0, STEPS, 100):  # four flushes; the third crosses into the next hour
        ts = base + 15_000 * (np.arange(k0, k0 + 100) + 120)
        t = np.tile(ts, SERIES)
        v = rng.random(len(t))
        sid = np.repeat(sids, len(ts))
        asyncio.run(st.append(AppendBatch(new_series=list(zip(sids.tolist(), lbs)) if k0 == 0 else [],
                                          sid=sid, t=t, v=v)))
        for s, tt, vv in zip(sid.tolist(), t.tolist(), v.tolist()):
            truth[s].append((tt, vv))
        if k0 < 300:
            st.flush()  # the last hundred stay in the head
    return st, truth, base


# window scan, window scan, join, cache, a batch of adjacent ids (cached), the same as one batch of a big selection
# (its range scanned, no fill: read/plan.py), a batch of one id in three of a range (joined, with the range's bounds)
@pytest.mark.parametrize("share", [1.0, 0.6, 0.45, 0.05, "adjacent", "adjacent in a scan", "one in three in a scan"])
def test_read_paths_agree(tmp_path, share, monkeypatch):
    from metricsgw.storage.read.querier import SampleQuerier

    # in a scan, a cache too small to take the metric whole (whose one entry every batch would share)
    st, truth, base = _load(tmp_path, (16 if "scan" in str(share) else 128) << 20)
    scans: list[int] = []
    real = SampleQuerier._read_metric_window
    monkeypatch.setattr(SampleQuerier, "_read_metric_window", lambda self, *a: scans.append(1) or real(self, *a))
    try:
        ss = st.select_series([Matcher("__name__", "=", "big")], None, None)
        scan_series = SERIES * 100 if "scan" in str(share) else 0
        if share in ("adjacent", "adjacent in a scan"):
            want = np.sort(ss.ids)[SERIES // 3: SERIES // 3 + 50]
        elif share == "one in three in a scan":
            want = np.sort(ss.ids)[SERIES // 3: SERIES // 3 + 150: 3]
        else:
            want = np.sort(ss.ids[: max(1, int(share * len(ss)))])
        for lo, hi in [(base, base + 10 * HOUR), (base + HOUR - 600_000, base + HOUR + 600_000)] * 2:  # cold, cached
            got = st.read_samples(want, lo, hi, QueryContext(scan_series=scan_series))
            exp = sorted((s, t, v) for s in want.tolist() for t, v in truth[s] if lo <= t <= hi)
            assert list(zip(got.sid.tolist(), got.t.tolist(), got.v.tolist())) == exp
        if scan_series:
            assert st.sample_cache_stats()[0] == 0  # no batch fills what the next would evict
            assert bool(scans) == (share == "adjacent in a scan")
    finally:
        st.close()


def test_whole_metric_window_scan_is_charged_and_stoppable(tmp_path):
    from metricsgw.errors import LimitExceeded

    st, _, base = _load(tmp_path)
    try:
        ids = np.sort(st.select_series([Matcher("__name__", "=", "big")], None, None).ids)
        with pytest.raises(LimitExceeded, match="--query.max-samples"):
            st.read_samples(ids, base, base + 10 * HOUR, QueryContext(max_samples=10_000))
    finally:
        st.close()


def test_first_read_leaves_the_files_merged(tmp_path, monkeypatch):
    """The read that fills a metric's files into the sample cache merges them too (cached as well): the next
    read of it, a dashboard's first refresh, selects from the merged block instead of merging."""
    from metricsgw.storage.read import querier

    st, truth, base = _load(tmp_path)
    merges: list[int] = []
    real = querier.merge_blocks
    monkeypatch.setattr(querier, "merge_blocks", lambda parts: merges.append(len(parts)) or real(parts))
    try:
        want = np.sort(st.select_series([Matcher("__name__", "=", "big")], None, None).ids[:100])
        lo, hi = base, base + 10 * HOUR
        exp = sorted((s, t, v) for s in want.tolist() for t, v in truth[s] if lo <= t <= hi)
        for n in range(3):
            got = st.read_samples(want, lo, hi, QueryContext())
            assert list(zip(got.sid.tolist(), got.t.tolist(), got.v.tolist())) == exp
            assert len(merges) == 1 and merges[0] >= 2, n  # merged on the first read, never again
    finally:
        st.close()


def test_a_cache_fill_the_query_cannot_hold_is_left_for_a_join(tmp_path):
    """The plan's one read-time decision (storage/read/plan.py): a fill reads whole files, so a query whose budget
    holds its window but not those files reads by a join and fills nothing; an unbounded one fills the cache."""
    st, truth, base = _load(tmp_path)
    try:
        ss = st.select_series([Matcher("__name__", "=", "big")], None, None)
        want = np.sort(ss.ids[:100])  # 5% of the metric: its own cache entry, 200 samples a series in the files
        lo, hi = base + 15_000 * 120, base + 15_000 * 250  # the first two flushes' files; 131 samples a series
        exp = sorted((s, t, v) for s in want.tolist() for t, v in truth[s] if lo <= t <= hi)
        got = st.read_samples(want, lo, hi, QueryContext(max_samples=15_000))  # holds 13,100, not a 20,000 fill
        assert list(zip(got.sid.tolist(), got.t.tolist(), got.v.tolist())) == exp
        assert st.sample_cache_stats()[0] == 0
        got = st.read_samples(want, lo, hi, QueryContext())
        assert list(zip(got.sid.tolist(), got.t.tolist(), got.v.tolist())) == exp
        assert st.sample_cache_stats()[0] > 0
    finally:
        st.close()


def test_every_read_cursor_keeps_parquet_footers_cached(tmp_path):
    """Each read runs on a cursor of its own: the footer cache must be the database's, not one session's."""
    st = Storage(str(tmp_path), duckdb_memory_limit=64 << 20)
    st.open()
    try:
        cur = st.samples.duckdb_cursor()
        assert cur.execute("SELECT current_setting('parquet_metadata_cache')").fetchall() == [(True,)]
    finally:
        st.close()
