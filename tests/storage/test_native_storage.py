"""Native histograms and exemplars in storage: bit-exact through head, WAL replay and Parquet,
first written wins, retention retires their files, a float-only WAL record is unchanged."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.model import STALE_NAN, canonical, series_id, series_key
from metricsgw.storage.batch import AppendBatch, NativeSamples
from metricsgw.storage.wal.native_wal import MAGIC as NATIVE_MAGIC
from metricsgw.storage.store import Storage
from metricsgw.storage.wal.walcodec import MAGIC as FLOAT_MAGIC
from metricsgw.storage.wal.wal import list_segments, read_segment, segment_name
from tests.native_requests import float_histogram, histogram_bytes, int_histogram

NOW = int(time.time() * 1000) // 1000 * 1000
HOUR = 3600_000
LABELS = [canonical([("__name__", "nh"), ("i", str(i))]) for i in range(3)]
SIDS = [series_id(lb) for lb in LABELS]


def _odd_histograms(t: int) -> list[bytes]:
    """Histograms whose bytes a decode + re-encode would not give back: a NaN sum with a payload,
    -0.0, custom buckets, every reset hint, and an unknown field (number 99) at the end."""
    nan_payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
    return [histogram_bytes(int_histogram(t)),
            histogram_bytes(float_histogram(t + 1) | {"sum": nan_payload, "zero_threshold": -0.0, "reset_hint": 3}),
            histogram_bytes({"count_int": 3, "sum": 2.5, "schema": -53, "positive_spans": [(0, 3)],
                             "positive_deltas": [1, 0, 0], "custom_values": [0.1, 0.5, 1.0], "reset_hint": 2,
                             "timestamp": t + 2}) + b"\x98\x06\x01",
            histogram_bytes(int_histogram(t + 3) | {"sum": STALE_NAN, "reset_hint": 1})]


def _batch(blobs: list[bytes], t0: int, new: bool = True, exemplar: bytes = b"") -> AppendBatch:
    sids = [SIDS[i % 3] for i in range(len(blobs))]
    ts = [t0 + i for i in range(len(blobs))]
    labels = series_key(canonical([("trace_id", "abc")])) if not exemplar else exemplar
    nat = NativeSamples(np.array(sids, np.int64), np.array(ts, np.int64), blobs,
                        np.array([SIDS[0]], np.int64), np.array([t0], np.int64), np.array([-0.0]), [labels])
    return AppendBatch(new_series=list(zip(SIDS, LABELS)) if new else [], native=nat)


def _read(st: Storage):
    h = st.read_histograms(np.array(SIDS), NOW - 24 * HOUR, NOW + HOUR, QueryContext())
    e = st.read_exemplars(np.array(SIDS), NOW - 24 * HOUR, NOW + HOUR, QueryContext())
    return (list(zip(h.sid.tolist(), h.t.tolist(), h.blob.to_pylist())),
            list(zip(e.sid.tolist(), e.t.tolist(), e.v.view(np.uint64).tolist(), e.labels.to_pylist())))


def _want(blobs: list[bytes], t0: int):
    rows = sorted((SIDS[i % 3], t0 + i, b) for i, b in enumerate(blobs))
    return rows


def _opened(path, **kw) -> Storage:
    st = Storage(str(path), **kw)
    st.open()
    return st


@pytest.mark.parametrize("flush_before_reopen", [False, True])
def test_histograms_and_exemplars_are_bit_exact_through_head_wal_and_parquet(tmp_path, flush_before_reopen):
    blobs = _odd_histograms(NOW)
    st = _opened(tmp_path)
    asyncio.run(st.append(_batch(blobs, NOW)))
    head = _read(st)
    assert head[0] == _want(blobs, NOW)
    assert head[1] == [(SIDS[0], NOW, np.float64(-0.0).view(np.uint64), series_key(canonical([("trace_id", "abc")])))]
    if flush_before_reopen:
        st.flush()
        assert len(st.table.current.histograms) == 1 and len(st.table.current.exemplars) == 1
        assert _read(st) == head
    st.close(flush=False)  # as after kill -9: whatever is not flushed comes back from the WAL
    st = _opened(tmp_path)
    try:
        assert _read(st) == head
        st.flush()
        assert _read(st) == head
    finally:
        st.close(flush=False)
    st = _opened(tmp_path)
    try:
        assert _read(st) == head, "read back from Parquet only"
        assert not list_segments(st.writer_dir) or not st.files.pending()
    finally:
        st.close(flush=False)


def test_first_written_wins_across_head_and_files(tmp_path):
    st = _opened(tmp_path)
    first = [histogram_bytes(int_histogram(NOW, scale=1))]
    second = [histogram_bytes(int_histogram(NOW, scale=2))]
    asyncio.run(st.append(_batch(first, NOW)))
    st.flush()
    asyncio.run(st.append(_batch(second, NOW, new=False, exemplar=b"other")))  # same (sid, t) again
    assert _read(st)[0] == _want(first, NOW)
    assert [e[3] for e in _read(st)[1]] == [series_key(canonical([("trace_id", "abc")]))]
    st.flush()
    assert _read(st)[0] == _want(first, NOW)
    st.close(flush=False)


def test_float_only_records_stay_a3_and_native_ones_are_n1(tmp_path):
    st = _opened(tmp_path)
    asyncio.run(st.append(_batch(_odd_histograms(NOW), NOW)))
    asyncio.run(st.append(AppendBatch(sid=np.array(SIDS[:1], np.int64), t=np.array([NOW], np.int64),
                                      v=np.array([1.0]))))
    st.close(flush=False)
    wal = Path(st.writer_dir)
    records = [p for seg in list_segments(str(wal)) for p in read_segment(str(wal / segment_name(seg)))]
    assert [r[:2] for r in records] == [NATIVE_MAGIC, FLOAT_MAGIC]


def test_retention_retires_histogram_and_exemplar_files_with_their_partitions(tmp_path):
    clock = [NOW / 1000]
    st = _opened(tmp_path, partition_ms=HOUR, retention_ms=2 * HOUR, clock=lambda: clock[0])
    old, recent = NOW - 5 * HOUR, NOW - 30 * 60_000
    asyncio.run(st.append(_batch([histogram_bytes(int_histogram(old))], old)))
    st.flush()
    asyncio.run(st.append(_batch([histogram_bytes(int_histogram(recent))], recent, new=False)))
    st.flush()
    snap = st.table.current
    assert len(snap.histograms) == 2 and len(snap.exemplars) == 2
    old_files = [snap.histograms[0], snap.exemplars[0]]
    st.maintenance.run()
    assert not st.maintenance.failing
    snap = st.table.current
    assert len(snap.histograms) == 1 and len(snap.exemplars) == 1 and not set(old_files) & snap.paths()
    assert [t for _, t, _ in _read(st)[0]] == [recent]
    st.table.collect()
    assert not any(tmp_path.joinpath(p).exists() for p in old_files)
    assert st.has_series(SIDS[0]), "the series still has a histogram on disk: retention keeps it"
    st.close(flush=False)
    st = _opened(tmp_path)  # and the file set opens with the kinds it wrote
    try:
        assert len(st.table.current.histograms) == 1 and [t for _, t, _ in _read(st)[0]] == [recent]
    finally:
        st.close(flush=False)


def test_a_histogram_only_series_is_selectable_by_time_after_restart(tmp_path):
    from metricsgw.model import Matcher

    st = _opened(tmp_path)
    asyncio.run(st.append(_batch([histogram_bytes(int_histogram(NOW))], NOW)))
    st.flush()
    st.close(flush=False)
    st = _opened(tmp_path)
    try:
        ss = st.select_series([Matcher("__name__", "=", "nh")], NOW - 1000, NOW + 1000, QueryContext())
        assert ss.ids.tolist() == [SIDS[0]]
        assert not len(st.select_series([Matcher("__name__", "=", "nh")], NOW + 10 * HOUR, NOW + 11 * HOUR,
                                        QueryContext()))
    finally:
        st.close(flush=False)


def test_reading_histograms_charges_the_query_budget(tmp_path):
    from metricsgw.errors import LimitExceeded

    st = _opened(tmp_path)
    try:
        asyncio.run(st.append(_batch(_odd_histograms(NOW), NOW)))
        with pytest.raises(LimitExceeded):
            st.read_histograms(np.array(SIDS), NOW - HOUR, NOW + HOUR, QueryContext(max_samples=2))
    finally:
        st.close(flush=False)


def test_a_flush_writes_a_file_per_partition_and_compaction_merges_a_closed_partition(tmp_path):
    st = _opened(tmp_path, partition_ms=HOUR)
    base = (NOW - 5 * HOUR) // HOUR * HOUR
    firsts = []
    for k in range(4):  # four flushes, each with a row in partition `base` and one in the next
        blobs = [histogram_bytes(int_histogram(base + 1000, scale=k + 1)), histogram_bytes(int_histogram(base + k))]
        if k == 0:
            firsts = blobs
        nat = NativeSamples(np.array([SIDS[0], SIDS[1]], np.int64), np.array([base + 1000, base + HOUR + k], np.int64),
                            blobs, np.array([SIDS[0]], np.int64), np.array([base + 1000]), np.array([float(k)]),
                            [series_key(canonical([("k", str(k))]))])
        asyncio.run(st.append(AppendBatch(new_series=list(zip(SIDS, LABELS)) if k == 0 else [], native=nat)))
        st.flush()
    assert len(st.table.current.histograms) == 8 and len(st.table.current.exemplars) == 4
    before = _read(st)
    assert [b for s, t, b in before[0] if t == base + 1000] == firsts[:1], "the first written of (sid, t) wins"
    st.maintenance.run()
    assert not st.maintenance.failing
    snap = st.table.current
    assert len(snap.histograms) == 2 and len(snap.exemplars) == 1  # both partitions closed: one file each
    assert _read(st) == before
    st.close(flush=False)
    st = _opened(tmp_path, partition_ms=HOUR)
    try:
        assert _read(st) == before
    finally:
        st.close(flush=False)
