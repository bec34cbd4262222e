"""The storage on real files: WAL durability and replay, Parquet flush, dedup, bit-exact values."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.model import STALE_NAN, Matcher, MetricMetadata, canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.store import Storage
from metricsgw.storage.wal.wal import list_segments, segment_name

NOW = int(time.time() * 1000) // 1000 * 1000


def labels(i: int, metric: str = "m"):
    return canonical([("__name__", metric), ("job", "j"), ("i", str(i))])


def batch(series_idx, ts, vs, new=True, metric="m"):
    lbs = [labels(i, metric) for i in series_idx]
    sids = [series_id(lb) for lb in lbs]
    return AppendBatch(new_series=list(zip(sids, lbs)) if new else [],
                       sid=np.array(sids, np.int64), t=np.array(ts, np.int64), v=np.array(vs, np.float64))


def read_all(st: Storage, metric: str = "m"):
    ss = st.select_series([Matcher("__name__", "=", metric)], None, None, QueryContext())
    blk = st.read_samples(ss.ids, NOW - 10**9, NOW + 10**9, QueryContext())
    by_sid = {int(s): lb for s, lb in zip(ss.ids, ss.labels)}
    return [(dict(by_sid[int(s)])["i"], int(t) - NOW, float(v)) for s, t, v in zip(blk.sid, blk.t, blk.v)]


def opened(path) -> Storage:
    st = Storage(str(path))
    st.open()
    return st


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("flush_before_reopen", [False, True])
def test_samples_survive_reopen_bit_exact(tmp_path, flush_before_reopen):
    values = [1.5, float("inf"), float("-inf"), float("nan"), STALE_NAN, -0.0]
    st = opened(tmp_path)
    run(st.append(batch([0] * 6, [NOW + k * 1000 for k in range(6)], values)))
    if flush_before_reopen:
        st.flush()
    st.close(flush=False)
    st = opened(tmp_path)
    got = st.read_samples(st.select_series([Matcher("i", "=", "0")], None, None).ids, NOW, NOW + 10_000,
                          QueryContext())
    assert np.array_equal(got.v.view(np.uint64), np.array(values, np.float64).view(np.uint64))
    st.close()


def test_out_of_order_accepted_and_exact_duplicate_kept_once(tmp_path):
    st = opened(tmp_path)
    run(st.append(batch([0, 0], [NOW + 2000, NOW + 1000], [2, 1])))
    st.flush()
    run(st.append(batch([0, 0], [NOW + 1000, NOW + 0], [9, 0], new=False)))  # duplicate of t=1000 after flush
    assert read_all(st) == [("0", 0, 0.0), ("0", 1000, 1.0), ("0", 2000, 2.0)]  # first-written value wins
    st.close()


def test_flush_writes_parquet_and_removes_flushed_wal_segments(tmp_path):
    st = opened(tmp_path)
    run(st.append(batch(range(10), [NOW] * 10, range(10))))
    before = list_segments(tmp_path / "wal" / "gw0")
    st.flush()
    after = list_segments(tmp_path / "wal" / "gw0")
    assert not set(before) & set(after), "flushed segments must be deleted"
    parts = list((tmp_path / "table" / "samples").glob("hour=*/part-*.parquet"))
    assert parts and all(p.stat().st_size > 0 for p in parts)
    assert list((tmp_path / "table" / "series" / "writer=gw0").glob("series-*.parquet"))
    assert len(read_all(st)) == 10
    st.close()


def test_torn_wal_tail_is_truncated_and_earlier_records_kept(tmp_path):
    st = opened(tmp_path)
    run(st.append(batch([0], [NOW], [1.0])))
    run(st.append(batch([1], [NOW], [2.0])))
    seg = st.wal.current_segment
    st.close(flush=False)
    path = tmp_path / "wal" / "gw0" / segment_name(seg)
    with open(path, "ab") as fh:  # a record header promising more bytes than were written
        fh.write(b"\x40\x00\x00\x00\x00\x00\x00\x00partial")
    st = opened(tmp_path)
    assert sorted(read_all(st)) == [("0", 0, 1.0), ("1", 0, 2.0)]
    st.close()


def test_half_written_parquet_is_ignored_and_removed(tmp_path):
    st = opened(tmp_path)
    run(st.append(batch([0], [NOW], [1.0])))
    st.flush()
    st.close(flush=False)
    part_dir = next((tmp_path / "table" / "samples").glob("hour=*"))
    junk = part_dir / "part-gw0-99999999.parquet.tmp"
    junk.write_bytes(b"PAR1 half a file")
    st = opened(tmp_path)
    assert not junk.exists()
    assert read_all(st) == [("0", 0, 1.0)]
    st.close()


def test_series_table_and_metadata_reload(tmp_path):
    st = opened(tmp_path)
    b = batch([0, 1], [NOW, NOW], [1, 2])
    b.metadata = [MetricMetadata("m", "gauge", "a gauge", "")]
    run(st.append(b))
    st.flush()
    st.close(flush=False)
    st = opened(tmp_path)
    assert st.has_series(series_id(labels(0)))
    assert st.label_values("i", [], None, None) == ["0", "1"]
    assert st.metadata("m") == {"m": [{"type": "gauge", "help": "a gauge", "unit": ""}]}
    st.close()


def test_select_series_window_and_limit(tmp_path):
    st = opened(tmp_path)
    run(st.append(batch([0], [NOW - 7200_000], [1])))
    run(st.append(batch([1], [NOW], [1])))
    recent = st.select_series([Matcher("__name__", "=", "m")], NOW - 60_000, NOW + 60_000)
    assert [dict(lb)["i"] for lb in recent.labels] == ["1"]
    assert len(st.select_series([Matcher("job", "=", "j")], None, None, limit=1)) == 1
    st.close()


def test_regex_and_negative_matchers(tmp_path):
    st = opened(tmp_path)
    run(st.append(batch(range(5), [NOW] * 5, range(5))))
    got = st.select_series([Matcher("__name__", "=~", "m|x"), Matcher("i", "=~", "[1-3]"), Matcher("i", "!=", "2")],
                           None, None)
    assert sorted(dict(lb)["i"] for lb in got.labels) == ["1", "3"]
    assert len(st.select_series([Matcher("absent", "=", "")], None, None)) == 5
    assert len(st.select_series([Matcher("absent", "!=", "")], None, None)) == 0
    st.close()


def test_query_budget_fires_while_loading(tmp_path):
    from metricsgw.errors import LimitExceeded

    st = opened(tmp_path)
    run(st.append(batch([0] * 100, [NOW + k for k in range(100)], range(100))))
    ids = st.select_series([Matcher("i", "=", "0")], None, None).ids
    with pytest.raises(LimitExceeded, match="--query.max-samples"):
        st.read_samples(ids, NOW, NOW + 1000, QueryContext(max_samples=50))
    st.close()


def test_compaction_merges_partition_files_and_keeps_every_sample_once(tmp_path):
    from metricsgw.storage.upkeep.compact import compact_partitions

    st = opened(tmp_path)
    st.partition_ms = 3600_000
    base = (NOW // 3600_000 - 3) * 3600_000  # a closed partition, hours ago
    expected = []
    for k in range(4):  # four flushes into the same partition, with an exact duplicate each time
        run(st.append(batch([0, 1], [base + k * 1000, base + k * 1000], [k, 10 + k], new=(k == 0))))
        run(st.append(batch([0], [base], [99.0], new=False)))
        st.flush()
    expected = sorted([("0", base + k * 1000 - NOW, float(k)) for k in range(4)]
                      + [("1", base + k * 1000 - NOW, float(10 + k)) for k in range(4)])
    part = next((tmp_path / "table" / "samples").glob("hour=*"))
    assert len(list(part.glob("*.parquet"))) == 4
    before = sorted(read_all(st))
    assert compact_partitions(st) == 1
    st.table.collect()
    assert len(list(part.glob("*.parquet"))) == 1
    assert sorted(read_all(st)) == before == expected
    st.close(flush=False)
    st = opened(tmp_path)
    assert sorted(read_all(st)) == expected
    st.close()


def test_flushed_files_hold_each_sample_once_first_written_wins(tmp_path):
    import pyarrow.parquet as pq

    st = opened(tmp_path)
    run(st.append(batch([0, 0, 1], [NOW + 1000, NOW + 1000, NOW], [1, 2, 5])))
    run(st.append(batch([0, 1], [NOW + 1000, NOW], [3, 6], new=False)))
    st.flush()
    rows = [pq.read_table(f).select(["t", "v"]).to_pylist() for f in (tmp_path / "table" / "samples").glob("*/*.parquet")]
    assert sorted(r["v"] for f in rows for r in f) == [1.0, 5.0]
    assert read_all(st) == sorted([("0", 1000, 1.0), ("1", 0, 5.0)])
    st.close()


@pytest.mark.parametrize("given_keys", [False, True])
def test_series_table_holds_each_new_series_key_once(tmp_path, given_keys):
    # The flush writes the series keys the appends collected (reused from the pipeline when it built
    # them, built from the labels otherwise), once per series, also when a batch repeats a series
    # or names one storage already has.
    from metricsgw.model import series_key
    from metricsgw.storage.files.parquet_io import read_series

    def with_keys(b):
        if given_keys:
            b.series_keys = [series_key(lb) for _, lb in b.new_series]
        return b

    st = opened(tmp_path)
    run(st.append(with_keys(batch([0], [NOW], [1.0]))))
    run(st.append(with_keys(batch([0, 1, 1, 2], [NOW + 1000] * 4, [2.0, 3.0, 4.0, 5.0]))))
    st.flush()
    sids, keys = read_series(list(st.table.current.series))
    assert sorted(zip(sids.tolist(), keys)) == sorted((series_id(labels(i)), series_key(labels(i))) for i in range(3))
    st.close(flush=False)
    st = opened(tmp_path)  # and they load again
    assert sorted(dict(lb)["i"] for lb in st.select_series([Matcher("__name__", "=", "m")], None, None).labels) \
        == ["0", "1", "2"]
    st.close(flush=False)
