"""Partition compaction on real files: per-metric streaming merge, first-written sample wins (bit-exact),
output sorted by (metric, sid, t) in the flush's Parquet layout, abandoned cleanly on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from metricsgw.limits.context import QueryContext
from metricsgw.model import STALE_NAN_BITS, Matcher, SampleBlock, canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.upkeep.compact import MAX_FILES_OPEN_PARTITION, TIER, compact_partitions
from metricsgw.storage.store import Storage

HOUR = 3600_000
NOW = int(time.time() * 1000)
BASE = (NOW // HOUR - 3) * HOUR  # a closed partition, hours ago
OTHER_NAN_BITS = 0x7FF8000000000001  # a NaN that is not the stale marker


class Written:
    """Appends samples to the storage and remembers the first-written value of each (sid, t)."""

    def __init__(self, st: Storage) -> None:
        self.st = st
        self.first: dict[tuple[int, int], int] = {}  # (sid, t) -> value bits
        self.calls = 0

    def add(self, metric: str, series: range, seconds: range, bits: np.ndarray | None = None,
            base: int = BASE) -> None:
        """One sample per series and second, offset from ``base``; values are distinct per call
        unless ``bits`` (series x seconds, uint64) is given."""
        lbs = [canonical([("__name__", metric), ("i", str(i))]) for i in series]
        sids = np.array([series_id(lb) for lb in lbs], np.int64)
        t = base + 1000 * np.array(seconds, np.int64)
        self.calls += 1
        if bits is None:
            vals = np.arange(len(sids) * len(t), dtype=np.float64) + 1e6 * self.calls + 0.5
            bits = vals.view(np.uint64).reshape(len(sids), len(t))
        new = [(int(s), lb) for s, lb in zip(sids, lbs) if not self.st.has_series(int(s))]
        asyncio.run(self.st.append(AppendBatch(new_series=new, sid=np.repeat(sids, len(t)), t=np.tile(t, len(sids)),
                                               v=np.ascontiguousarray(bits, np.uint64).ravel().view(np.float64))))
        for s, row in zip(sids.tolist(), bits.tolist()):
            for tt, b in zip(t.tolist(), row):
                self.first.setdefault((s, tt), b)

    def expected(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys = sorted(self.first)
        return (np.array([k[0] for k in keys], np.int64), np.array([k[1] for k in keys], np.int64),
                np.array([self.first[k] for k in keys], np.uint64))


def opened(path) -> Storage:
    st = Storage(str(path))
    st.open()
    return st


def read_everything(st: Storage) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ss = st.select_series([Matcher("__name__", "=~", ".+")], None, None, QueryContext())
    b = st.read_samples(ss.ids, 0, NOW + HOUR, QueryContext())
    return b.sid, b.t, b.v.view(np.uint64)


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def sample_files(path) -> list:
    return sorted((path / "table" / "samples").glob("hour=*/*.parquet"))


def assert_sorted_by_metric_sid_t(path) -> None:
    tb = pq.read_table(path)
    metric = np.array(tb.column("metric").to_pylist())
    sid, t = tb.column("sid").to_numpy(), tb.column("t").to_numpy()
    same_m = metric[1:] == metric[:-1]
    same_s = same_m & (sid[1:] == sid[:-1])
    assert (metric[1:] >= metric[:-1]).all()
    assert (sid[1:][same_m] >= sid[:-1][same_m]).all()  # compared, never subtracted: 64-bit hashes
    assert (t[1:][same_s] > t[:-1][same_s]).all()


def test_metrics_merge_in_order_and_first_written_wins_bit_exact(tmp_path):
    st = opened(tmp_path)
    w = Written(st)
    n_series, secs = 4, 10
    alpha_first = np.arange(n_series * secs, dtype=np.float64).view(np.uint64).reshape(n_series, secs).copy()
    alpha_first[0, 5] = STALE_NAN_BITS  # duplicated later with another NaN and a number: the stale marker stays
    w.add("alpha", range(n_series), range(100, 110), alpha_first)
    w.add("beta", range(3), range(100, 110))
    st.flush()
    w.add("alpha", range(n_series), range(110, 120))  # time-disjoint: the usual flush
    w.add("gamma", range(2), range(100, 120))  # a metric in one file only
    st.flush()
    alpha_overlap = np.full((n_series, secs), 7.25).view(np.uint64)
    alpha_overlap[0, 0] = OTHER_NAN_BITS  # t=105: the stale marker of file 1 wins
    alpha_overlap[1, 2] = STALE_NAN_BITS  # t=107: a stale marker written second loses to file 1's number
    w.add("alpha", range(n_series), range(105, 115), alpha_overlap)  # overlaps files 1 and 2
    w.add("beta", range(1, 5), range(50, 60))  # out of order: earlier than file 1, and new series
    st.flush()
    w.add("alpha", range(n_series), range(110, 120))  # a replay of file 2 with other values: file 2 wins
    st.flush()
    flushed = sample_files(tmp_path)
    assert len(flushed) == 4
    before = read_everything(st)
    assert same(before, w.expected())

    assert compact_partitions(st) == 1
    st.table.collect()
    (out,) = sample_files(tmp_path)
    assert same(read_everything(st), before)
    sid, t, bits = read_everything(st)
    stale_at = (sid == series_id(canonical([("__name__", "alpha"), ("i", "0")]))) & (t == BASE + 105_000)
    assert bits[stale_at].tolist() == [STALE_NAN_BITS]
    assert_sorted_by_metric_sid_t(out)
    assert pq.read_table(out).column("metric").unique().to_pylist() == ["alpha", "beta", "gamma"]
    st.close(flush=False)
    st = opened(tmp_path)
    assert same(read_everything(st), before)
    st.close()


def test_output_has_the_flush_layout(tmp_path):
    st = opened(tmp_path)
    w = Written(st)
    w.add("alpha", range(3), range(0, 10))
    st.flush()
    w.add("alpha", range(3), range(10, 20))
    st.flush()
    flushed = pq.ParquetFile(sample_files(tmp_path)[0])
    assert compact_partitions(st) == 1
    st.table.collect()
    merged = pq.ParquetFile(sample_files(tmp_path)[0])
    assert merged.schema_arrow.field("metric").type == pa.dictionary(pa.int32(), pa.string())
    assert merged.schema_arrow == flushed.schema_arrow
    for i in range(4):
        a, b = flushed.metadata.row_group(0).column(i), merged.metadata.row_group(0).column(i)
        assert (b.path_in_schema, b.compression, b.encodings) == (a.path_in_schema, a.compression, a.encodings)
    rg = merged.metadata.row_group(0)
    assert rg.column(0).compression == "ZSTD" and "RLE_DICTIONARY" in rg.column(0).encodings
    assert "DELTA_BINARY_PACKED" in rg.column(1).encodings and "DELTA_BINARY_PACKED" in rg.column(2).encodings
    assert "BYTE_STREAM_SPLIT" in rg.column(3).encodings
    st.close()


def test_metrics_spanning_row_groups_recompact_exactly(tmp_path):
    rows = 7  # small row groups: metrics span several, and row groups hold several metrics
    st = opened(tmp_path)
    w = Written(st)
    w.add("alpha", range(5), range(0, 6))
    w.add("beta", range(1), range(0, 3))
    w.add("delta", range(3), range(0, 4))
    st.flush()
    w.add("alpha", range(5), range(6, 12))
    w.add("gamma", range(2), range(0, 2))
    st.flush()
    assert compact_partitions(st, row_group_rows=rows) == 1
    st.table.collect()
    (once,) = sample_files(tmp_path)
    sizes = [pq.ParquetFile(once).metadata.row_group(i).num_rows
             for i in range(pq.ParquetFile(once).metadata.num_row_groups)]
    assert sizes[:-1] == [rows] * (len(sizes) - 1) and 0 < sizes[-1] <= rows
    assert sum(sizes) == len(w.first)

    w.add("alpha", range(5), range(10, 14))  # overlaps the compacted file: it wins on t=10, 11
    w.add("beta", range(1), range(3, 40))  # one metric across several row groups of the new file too
    st.flush()
    w.add("delta", range(3), range(2, 3))  # exact duplicates only
    st.flush()
    before = read_everything(st)
    assert same(before, w.expected())
    assert compact_partitions(st, row_group_rows=rows) == 1
    st.table.collect()
    (twice,) = sample_files(tmp_path)
    assert same(read_everything(st), before)
    assert_sorted_by_metric_sid_t(twice)
    assert pq.read_table(twice).num_rows == len(w.first)
    st.close()


def test_default_row_groups_with_a_metric_bigger_than_one(tmp_path):
    st = opened(tmp_path)
    w = Written(st)
    w.add("big", range(600), range(0, 240))  # 144k rows: two 128k-row groups in the flushed file
    w.add("small", range(2), range(0, 240))
    st.flush()
    w.add("big", range(600), range(240, 480))
    st.flush()
    before = read_everything(st)
    assert compact_partitions(st) == 1
    st.table.collect()
    (out,) = sample_files(tmp_path)
    meta = pq.ParquetFile(out).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1 << 17, 1 << 17, 288_480 - (2 << 17)]
    assert same(read_everything(st), before)
    assert same(before, w.expected())
    st.close()


def test_stop_abandons_and_leaves_no_temporary_file(tmp_path):
    st = opened(tmp_path)
    w = Written(st)
    for k in range(3):
        w.add("alpha", range(2), range(10 * k, 10 * k + 10))
        st.flush()
    files_before = st.table.current.samples
    st.stopping.set()  # shutdown has begun
    assert compact_partitions(st) == 0
    assert st.table.current.samples == files_before
    assert list(tmp_path.rglob("*.tmp")) == []
    assert len(sample_files(tmp_path)) == 3
    st.stopping.clear()
    assert compact_partitions(st) == 1
    st.close()


def test_open_partition_merges_its_newest_files_by_size_class(tmp_path):
    """The open partition: nothing until TIER files of one size class end it; then only those (the older, bigger
    file stays as it is); past MAX_FILES_OPEN_PARTITION files, all of them."""
    st = opened(tmp_path)
    w = Written(st)
    current = NOW // HOUR * HOUR
    w.add("alpha", range(400), range(0, 60), base=current)  # a big file first
    st.flush()
    for k in range(TIER - 1):
        w.add("alpha", range(2), range(100 + k, 101 + k), base=current)
        st.flush()
    w.add("alpha", range(2), range(200, 201), base=current)  # the head still holds samples of this hour
    assert compact_partitions(st) == 0
    st.flush()  # the TIER-th small file
    w.add("alpha", range(2), range(201, 202), base=current)  # still open
    (big,) = [f for f in sample_files(tmp_path) if f.stat().st_size == max(x.stat().st_size for x in sample_files(tmp_path))]
    assert compact_partitions(st) == 1
    st.table.collect()
    files = sample_files(tmp_path)
    assert len(files) == 2 and big in files  # the run of small files became one; the big one was not rewritten
    assert same(read_everything(st), w.expected())
    assert compact_partitions(st) == 0  # two files of different classes: nothing to do until the hour closes
    st.close()


def test_open_partition_with_too_many_files_is_merged_whole(tmp_path):
    st = opened(tmp_path)
    w = Written(st)
    current = NOW // HOUR * HOUR
    for k in range(MAX_FILES_OPEN_PARTITION):  # sizes alternate between classes: no run of TIER ever forms
        w.add("alpha", range(2 if k % 2 else 300), range(k, k + 1), base=current)
        st.flush()
    w.add("alpha", range(2), range(500, 501), base=current)
    assert compact_partitions(st) == 1
    st.table.collect()
    assert len(sample_files(tmp_path)) == 1
    assert same(read_everything(st), w.expected())
    st.close()


def test_merge_streams_a_metric_in_bounded_chunks_and_equals_the_whole_merge(tmp_path):
    """Random files with overlapping series, times and duplicates (other values), in tiny row groups: the merge by
    series-id chunks equals merging each metric whole, and no chunk holds more than about a row group per file."""
    rng = np.random.default_rng(3)
    rows = 16
    st = opened(tmp_path)
    w = Written(st)
    for k in range(5):
        series = rng.choice(60, int(rng.integers(5, 60)), replace=False)
        for i in series.tolist():
            start = int(rng.integers(0, 40))
            w.add("alpha", range(i, i + 1), range(start, start + int(rng.integers(1, 25))))
        st.flush()
    paths = [f.path for f in sorted(st.table.current.samples, key=lambda f: f.seq)]
    from metricsgw.storage.upkeep import compact

    # Rewrite every flushed file in tiny row groups, so that cursors cross row groups all the time.
    small = []
    for n, p in enumerate(paths):
        out = str(tmp_path / f"small-{n}.parquet")
        assert compact._merge_files([p], out, rows, threading.Event())
        small.append(out)
    with contextlib.ExitStack() as stack:
        readers = [compact._MetricReader(stack.enter_context(pq.ParquetFile(p)), p) for p in small]
        chunks = list(compact._merged_chunks([compact._Cursor(r, *r.rows["alpha"]) for r in readers]))
    assert max(len(c) for c in chunks) <= 2 * rows * len(small)
    got = SampleBlock(*(np.concatenate(c) for c in zip(*((b.sid, b.t, b.v) for b in chunks))))
    sid, t, bits = w.expected()
    assert same((got.sid, got.t, got.v.view(np.uint64)), (sid, t, bits))
    st.close()


def test_a_long_merge_lets_a_due_flush_run_and_write_order_holds(tmp_path):
    """Compaction runs in the flusher thread; between its chunks a flush that is due runs (the head would fill and
    writes be refused otherwise). In the open partition the flushed file comes after the merged one in write
    order: a sample written again later (another value), flushed during the merge, loses to the first-written one."""
    st = Storage(str(tmp_path), flush_max_samples=2)  # no flusher thread here: flushes are the test's
    st.open()
    w = Written(st)
    current = NOW // HOUR * HOUR
    for k in range(TIER):
        w.add("alpha", range(2), range(k, k + 1), base=current)
        st.flush()
    w.add("alpha", range(2), range(0, 1), base=current)  # a replay of the first file, other values: must lose
    st.flusher.thread = threading.current_thread()  # as in the flusher: compaction's flush_if_due may flush
    assert compact_partitions(st, row_group_rows=1) == 1
    assert st.files.head_samples() == 0  # flushed during the merge
    st.table.collect()
    merged, flushed = sorted(st.table.current.samples, key=lambda f: f.seq)
    assert (merged.min_t, merged.max_t) == (current, current + 1000 * (TIER - 1))
    assert (flushed.min_t, flushed.max_t) == (current, current)
    assert same(read_everything(st), w.expected())
    st.flusher.thread = None
    st.close()
