"""The series table checkpoint: saved and loaded it is the same catalog, and start-up adds the series
and spans files written after it (and the WAL) on top."""

from __future__ import annotations

import asyncio
import os
import random
import time

import numpy as np

from metricsgw.model import METRIC_NAME, Matcher, series_id, series_key
from metricsgw.storage.catalog import catalog_checkpoint, packed_values
from metricsgw.storage.catalog.catalog import Catalog
from metricsgw.storage.files import parquet_io
from metricsgw.storage.store import Storage
from tests.ingest.test_bulk_new_series import _mixed_series
from tests.storage.test_storage import NOW, batch, read_all


def _picks(c: Catalog, matchers) -> list[int]:
    return sorted(int(c.sids.a[g]) for t, rows in c.select(matchers, NOW - 5000, NOW + 5000)
                  for g in t.gidx.view[rows])


def test_checkpoint_round_trip_is_the_same_catalog(tmp_path):
    series = _mixed_series(random.Random(7))
    cat = Catalog()
    added = cat.add_many(series)
    sids = np.array([s for s, _ in added], np.int64)
    cat.touch(sids[::2], np.full(len(sids[::2]), NOW, np.int64))
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=42)
    back, covered, _ = catalog_checkpoint.load(str(tmp_path))
    assert covered == 42 and len(back) == len(cat)
    for sid, lb in added:
        assert back.labels(sid) == lb
    for matchers in ([Matcher("__name__", "=", "up")], [Matcher("gpu", "=~", "1|2")], [Matcher("A", "=", "")],
                     [Matcher("note", "!=", "")]):
        assert _picks(back, matchers) == _picks(cat, matchers)
    assert back.dense(sids).tolist() == cat.dense(sids).tolist()
    late = [s for s in _mixed_series(random.Random(8)) if s[0] not in cat][:20]
    assert back.add_many(late) == cat.add_many(late)  # it keeps growing like the original
    assert back.labels(late[0][0]) == late[0][1]


def test_label_values_stay_packed_until_read_and_are_saved_again_as_they_came(tmp_path, monkeypatch):
    """A restart makes no column's values Python strings (0.5 s at 2.7M series): a column's become strings when a
    read or a write first needs them, a checkpoint written before that keeps the packed values as they are, and a
    column a write grows is saved grown."""
    series = [(series_id(lb), lb) for lb in (((METRIC_NAME, m), ("ns", f"n{i % 3}"), ("pod", f"p{i}"))
                                              for m in ("a", "b") for i in range(50))]
    cat = Catalog()
    cat.add_many(series)
    cat.touch(np.array([s for s, _ in series], np.int64), np.full(len(series), NOW, np.int64))
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=1)
    decoded = _count_decoding(monkeypatch)
    back, _, _ = catalog_checkpoint.load(str(tmp_path))
    assert back.nbytes() > 0  # what /metrics shows: counted as packed
    assert decoded == [] and all(c.saved_form() is not None for t in back.tables for c in t.columns.values())
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(back), covered_seq=2)  # still packed
    assert decoded == []
    new = ((METRIC_NAME, "a"), ("ns", "n1"), ("pod", "p-new"))
    back.add_many([(series_id(new), new)])  # a write makes strings of the columns it adds to, and only those
    back.touch(np.array([series_id(new)], np.int64), np.array([NOW], np.int64))
    assert len(decoded) == 2 and back.metrics["b"].columns["pod"].saved_form() is not None
    assert back.labels(series_id(new)) == new
    again, covered, _ = catalog_checkpoint.load(str(tmp_path))
    assert covered == 2 and [again.labels(s) for s, _ in series] == [lb for _, lb in series]
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(back), covered_seq=3)
    last, _, _ = catalog_checkpoint.load(str(tmp_path))
    assert last.labels(series_id(new)) == new and [last.labels(s) for s, _ in series] == [lb for _, lb in series]
    assert _picks(last, [Matcher("pod", "=~", "p1|p-new")]) == sorted(
        s for s, lb in [*series, (series_id(new), new)] if dict(lb)["pod"] in ("p1", "p-new"))


def _count_decoding(monkeypatch) -> list:
    """Each time a column's values become Python strings (packed_values.decode of more than one value)."""
    decoded = []
    real = packed_values.decode
    monkeypatch.setattr(packed_values, "decode", lambda arr: (decoded.append(len(arr)) if len(arr) > 1 else None)
                        or real(arr))
    return decoded


def test_series_a_restart_brings_are_coded_without_making_loaded_values_strings(tmp_path, monkeypatch):
    """The series a checkpoint lacks (registered from their keys at start-up) are coded against the loaded columns
    in Arrow: values already there keep their codes, new ones are appended, and the catalog answers as one that
    registered them all from the start."""
    def labels(m: str, i: int):
        return ((METRIC_NAME, m), ("host", f"h{i % 7}"), ("pod", f"p{i}-é日" if i % 5 == 0 else f"p{i}"))

    old = [(series_id(lb), lb) for lb in (labels(m, i) for m in ("a", "b") for i in range(60))]
    cat = Catalog()
    cat.add_many(old)
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=1)
    fresh = [(series_id(lb), lb) for lb in (labels(m, i) for m in ("a", "c") for i in range(50, 90))]
    whole = Catalog()
    whole.add_many(old + fresh)
    decoded = _count_decoding(monkeypatch)
    back, _, _ = catalog_checkpoint.load(str(tmp_path))
    keys = [series_key(lb) for _, lb in fresh]
    assert back.add_keys(np.array([s for s, _ in fresh], np.int64), keys).tolist() == [
        i for i, (s, _) in enumerate(fresh) if s not in cat]
    assert all(c.saved_form() is not None for m in ("a", "b") for c in back.metrics[m].columns.values())
    assert 60 not in decoded and 61 not in decoded  # ("c"'s new columns are made of strings)
    assert back.metrics["a"].columns["pod"].values[:61] == cat.metrics["a"].columns["pod"].values
    for s, lb in old + fresh:
        assert back.labels(s) == lb
    every = np.unique([s for s, _ in old + fresh])
    for c in (back, whole):
        c.touch(every, np.full(len(every), NOW, np.int64))
    for matchers in ([Matcher("host", "=", "h3")], [Matcher("pod", "=~", "p5.*")], [Matcher("__name__", "=", "c")]):
        assert _picks(back, matchers) == _picks(whole, matchers) != []
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(back), covered_seq=2)
    again, _, _ = catalog_checkpoint.load(str(tmp_path))
    assert [again.labels(s) for s, _ in old + fresh] == [lb for _, lb in old + fresh]


def test_an_upgraded_gateway_reads_its_version_2_checkpoint(tmp_path, monkeypatch):
    """Version 2 packed each column's values as JSON: read at the first start after an upgrade, replaced by the
    next save."""
    import json

    import zstandard
    series = _mixed_series(random.Random(4))
    cat = Catalog()
    added = cat.add_many(series)
    with monkeypatch.context() as m:
        m.setattr(catalog_checkpoint, "_VERSION", 2)
        m.setattr(packed_values, "pack_list", lambda v: zstandard.ZstdCompressor().compress(
            json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")))
        catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=4)
    back, covered, _ = catalog_checkpoint.load(str(tmp_path))
    assert covered == 4 and [back.labels(s) for s, _ in added] == [lb for _, lb in added]
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(back), covered_seq=5)
    again, covered, _ = catalog_checkpoint.load(str(tmp_path))
    assert covered == 5 and [again.labels(s) for s, _ in added] == [lb for _, lb in added]


def test_a_checkpoint_cut_short_or_of_the_old_format_is_not_used(tmp_path):
    series = _mixed_series(random.Random(3))
    cat = Catalog()
    cat.add_many(series)
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=1)
    path = tmp_path / catalog_checkpoint.NAME
    whole = path.read_bytes()
    for broken in (whole[:-1], whole + b"x", whole[:100], b"PK\x03\x04" + whole[4:]):
        path.write_bytes(broken)
        assert catalog_checkpoint.load(str(tmp_path)) is None
    path.unlink()
    legacy = tmp_path / "catalog.npz.zst"  # an older version's file, unreadable: not used either
    legacy.write_bytes(b"old")
    assert catalog_checkpoint.load(str(tmp_path)) is None
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=1)
    assert not legacy.exists() and catalog_checkpoint.load(str(tmp_path)) is not None


def _save_version_1(root, snap: dict, covered_seq: int) -> None:
    """A checkpoint as metricsgw wrote it before catalog.zst (npz through zstd, every label value in one JSON)."""
    import io
    import json

    import zstandard
    strings = json.dumps({"version": 1, "covered_seq": covered_seq, "tables": snap["tables"],
                          "columns": snap["columns"], "forgotten_until": None}, ensure_ascii=False).encode()
    buf = io.BytesIO()
    np.savez(buf, sids=snap["sids"], order=np.argsort(snap["sids"], kind="stable").astype(np.int32),
             first_ms=snap["first_ms"], last_ms=snap["last_ms"], metric_idx=snap["metric_idx"],
             gidx=np.concatenate(snap["gidx"]), gidx_len=np.array([len(g) for g in snap["gidx"]], np.int64),
             codes=np.concatenate(snap["codes"]), codes_len=np.array([len(c) for c in snap["codes"]], np.int64),
             strings=np.frombuffer(strings, np.uint8))
    (root / "catalog.npz.zst").write_bytes(zstandard.ZstdCompressor().compress(buf.getvalue()))


def test_an_upgraded_gateway_starts_from_its_version_1_checkpoint(tmp_path):
    """The checkpoint of the version before (catalog.npz.zst) is read at the first start after an upgrade (at 2.7M
    series the series files took 38 s instead), grows like any catalog, and the next save replaces it."""
    series = _mixed_series(random.Random(9))
    cat = Catalog()
    added = cat.add_many(series)
    sids = np.array([s for s, _ in added], np.int64)
    cat.touch(sids, np.full(len(sids), NOW, np.int64))
    _save_version_1(tmp_path, catalog_checkpoint.snapshot(cat), covered_seq=5)
    back, covered, _ = catalog_checkpoint.load(str(tmp_path))
    assert covered == 5 and [back.labels(s) for s, _ in added] == [lb for _, lb in added]
    for matchers in ([Matcher("gpu", "=~", "1|2")], [Matcher("note", "!=", "")]):
        assert _picks(back, matchers) == _picks(cat, matchers)
    late = [s for s in _mixed_series(random.Random(10)) if s[0] not in cat][:20]
    assert back.add_many(late) == cat.add_many(late)
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(back), covered_seq=6)
    assert not (tmp_path / "catalog.npz.zst").exists()
    again, covered, _ = catalog_checkpoint.load(str(tmp_path))
    assert covered == 6 and [again.labels(s) for s, _ in added + late] == [lb for _, lb in added + late]


def test_a_loaded_checkpoint_looks_series_up_without_sorting_every_sid(tmp_path, monkeypatch):
    """The checkpoint keeps the sids' order: a restarted process' first lookup (its first write, or a query process
    joining newer series files) does not sort 2.7M sids first; a saved order that does not fit is not used."""
    series = [(series_id(lb), lb) for lb in (((METRIC_NAME, "m"), ("i", str(i))) for i in range(5000))]
    cat = Catalog()  # more series than the dict serves alone (a few thousand): lookups take the sorted index
    sids = np.array([s for s, _ in cat.add_many(series)], np.int64)
    catalog_checkpoint.save(str(tmp_path), catalog_checkpoint.snapshot(cat), covered_seq=1)
    expected = cat.lookup(np.concatenate([sids[::-1], [12345, -7]]))
    monkeypatch.setattr(Catalog, "_extend_index", lambda *a: (_ for _ in ()).throw(AssertionError("sorted again")))
    back, _, _ = catalog_checkpoint.load(str(tmp_path))
    assert back.lookup(np.concatenate([sids[::-1], [12345, -7]])).tolist() == expected.tolist()
    assert expected[-2:].tolist() == [-1, -1] and sorted(expected[:-2].tolist()) == list(range(len(sids)))
    swapped = np.argsort(sids, kind="stable")
    swapped[[0, 1]] = swapped[[1, 0]]
    assert not back.adopt_order(swapped) and not back.adopt_order(swapped[:-1])


def test_restart_loads_checkpoint_then_newer_files_and_wal(tmp_path):
    st = Storage(str(tmp_path))
    st.open()
    try:
        asyncio.run(st.append(batch(range(50), [NOW] * 50, [1.0] * 50)))
        st.flush()  # writes the checkpoint (the table grew from nothing)
        assert os.path.exists(tmp_path / "wal" / "gw0" / catalog_checkpoint.NAME)
        asyncio.run(st.append(batch(range(50, 53), [NOW + 1000] * 3, [2.0] * 3)))
        st.flush()  # a series file after the checkpoint (3 new series: under a tenth, no new checkpoint)
        asyncio.run(st.append(batch(range(53, 55), [NOW + 2000] * 2, [3.0] * 2)))  # only in the WAL
    finally:
        st.close(flush=False)
    _, covered, _ = catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))
    st = Storage(str(tmp_path))
    st.open()
    try:
        assert len(st.catalog) == 55 and catalog_checkpoint.covered_seq(st.table.current, "gw0") > covered
        assert sorted(int(i) for i, _, _ in read_all(st)) == list(range(55))
        sel = st.select_series([Matcher("i", "=~", "5[0-4]")], NOW + 500, NOW + 5000, None)
        assert sorted(dict(lb)["i"] for lb in sel.labels) == [str(i) for i in range(50, 55)]
    finally:
        st.close(flush=False)


def test_unreadable_checkpoint_falls_back_to_the_series_files(tmp_path):
    st = Storage(str(tmp_path))
    st.open()
    asyncio.run(st.append(batch(range(10), [NOW] * 10, [1.0] * 10)))
    st.close()
    (tmp_path / "wal" / "gw0" / catalog_checkpoint.NAME).write_bytes(b"not a checkpoint")
    st = Storage(str(tmp_path))
    st.open()
    try:
        assert len(st.catalog) == 10 and len(read_all(st)) == 10
    finally:
        st.close(flush=False)


def test_series_dropped_by_retention_do_not_come_back_from_the_checkpoint(tmp_path):
    minute = 60_000
    now = [NOW / 1000]

    def opened() -> Storage:
        st = Storage(str(tmp_path), partition_ms=minute, retention_ms=3 * minute, clock=lambda: now[0])
        st.open()
        return st

    st = opened()
    asyncio.run(st.append(batch(range(10), [NOW] * 10, [1.0] * 10)))
    st.flush()
    assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 10
    now[0] += 10 * minute / 1000
    later = NOW + 10 * minute
    asyncio.run(st.append(batch(range(10, 12), [later] * 2, [2.0] * 2)))
    st.flush()
    st.maintenance.run()  # the first 10 series' partition leaves retention: they are dropped
    assert not st.maintenance.failing and len(st.catalog) == 2
    assert catalog_checkpoint.load(str(tmp_path / "wal" / "gw0")) is None  # the stale checkpoint is gone at once
    asyncio.run(st.append(batch(range(12, 13), [later + 1000], [3.0])))
    st.flush()  # and the next flush writes a new one, without them
    assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 3
    st.close(flush=False)
    st = opened()
    try:
        assert len(st.catalog) == 3
        assert sorted(int(i) for i, _, _ in read_all(st)) == [10, 11, 12]
    finally:
        st.close(flush=False)


def test_series_the_checkpoint_took_before_their_flush_still_reach_a_series_file(tmp_path):
    """The flusher checkpoints after its commit while appends go on: the checkpoint may hold series newer than the
    WAL cut. After a crash they come back known from it; the next flush must still write them to a series file,
    or every other reader of the table (query processes, peers) would never learn their labels."""
    st = Storage(str(tmp_path))
    st.open()
    try:
        asyncio.run(st.append(batch(range(50), [NOW] * 50, [1.0] * 50)))
        st.flush()
        asyncio.run(st.append(batch(range(50, 110), [NOW + 1000] * 60, [2.0] * 60)))  # after the cut
        st.book._last_save -= 3600  # the CPU share's wait after the flush's checkpoint, passed
        st.book.checkpoint()  # as the flusher's, landing after these arrived
        assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 110
    finally:
        st.close(flush=False)  # a crash: the 60 are in the WAL and the checkpoint, in no series file
    st = Storage(str(tmp_path))
    st.open()
    try:
        st.flush()
    finally:
        st.close(flush=False)
    reader = Storage(str(tmp_path), writer_id="gw1")  # another writer of the table: it knows series by their files
    reader.open()
    try:
        sel = reader.select_series([Matcher("i", "=~", ".+")], NOW - 5000, NOW + 5000, None)
        assert len(sel.labels) == 110
    finally:
        reader.close(flush=False)


def test_a_growing_table_is_checkpointed_between_flushes(tmp_path):
    """A young gateway's series are all in its WAL: the flusher checkpoints them before any flush (at most every
    CHECKPOINT_BETWEEN_FLUSHES_S), so a restart registers them from arrays, not by splitting every key again."""
    from metricsgw.storage.upkeep import flusher

    st = Storage(str(tmp_path), flush_interval_s=3600)
    st.open()
    st.start_background()
    path = tmp_path / "wal" / "gw0" / catalog_checkpoint.NAME
    try:
        asyncio.run(st.append(batch(range(40), [NOW] * 40, [1.0] * 40)))
        st.book._last_save -= flusher.CHECKPOINT_BETWEEN_FLUSHES_S
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:  # the flusher's loop looks every second
            time.sleep(0.05)
        assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 40
        assert st.table.current.table_version == 0 or not list(st.table.current.own("series", "gw0"))  # no flush
    finally:
        st.close(flush=False)
    st = Storage(str(tmp_path))
    st.open()
    try:
        assert len(st.catalog) == 40 and len(st.unflushed) == 40  # known from the checkpoint, still to be flushed
        assert sorted(int(i) for i, _, _ in read_all(st)) == list(range(40))
    finally:
        st.close(flush=False)


def _fifty_then_three_more(st: Storage) -> None:
    """A checkpoint of 50 series, then 3 more flushed after it (a series and a spans file)."""
    asyncio.run(st.append(batch(range(50), [NOW] * 50, [1.0] * 50)))
    st.flush()
    asyncio.run(st.append(batch(range(50, 53), [NOW + 1000] * 3, [2.0] * 3)))
    st.flush()


def test_a_query_process_starts_from_its_shards_checkpoint_then_its_newer_files(tmp_path, monkeypatch):
    """A process following the writer (a query process beside its ingest shard) loads the writer's checkpoint
    instead of splitting every key of its series files; the writer's files after the checkpoint join on top, and
    what it reads is what it would have read from the files alone."""
    st = Storage(str(tmp_path))
    st.open()
    try:
        _fifty_then_three_more(st)  # a series file after the checkpoint
    finally:
        st.close(flush=False)
    answers, read = [], []
    real = parquet_io.read_series_sids
    monkeypatch.setattr(parquet_io, "read_series_sids", lambda path: (read.append(path), real(path))[1])
    for checkpoint in (True, False):
        if not checkpoint:
            os.remove(tmp_path / "wal" / "gw0" / catalog_checkpoint.NAME)
        read.clear()
        reader = Storage(str(tmp_path), writer_id="gw0-q0")
        reader.open()
        try:
            assert len(read) == (1 if checkpoint else 2)  # the newer series file only / both
            assert len(reader.catalog) == 53
            sel = reader.select_series([Matcher("i", "=~", ".+")], NOW - 5000, NOW + 5000, None)
            answers.append((sorted(sel.labels), sorted(int(i) for i, _, _ in read_all(reader))))
        finally:
            reader.close(flush=False)
    assert answers[0] == answers[1] and len(answers[0][0]) == 53 and answers[0][1] == list(range(53))


def _restart_reads(tmp_path, monkeypatch) -> tuple[int, int]:
    """(series files, spans files) a restart of writer gw0 reads beside its checkpoint."""
    series, spans = [], []
    real_series, real_spans = parquet_io.read_series, parquet_io.read_spans
    monkeypatch.setattr(parquet_io, "read_series", lambda paths: (series.extend(paths), real_series(paths))[1])
    monkeypatch.setattr(parquet_io, "read_spans", lambda path: (spans.append(path), real_spans(path))[1])
    st = Storage(str(tmp_path))
    st.open()
    try:
        assert len(st.catalog) == 53 and sorted({int(i) for i, _, _ in read_all(st)}) == list(range(53))
    finally:
        st.close(flush=False)
    monkeypatch.setattr(parquet_io, "read_series", real_series)
    monkeypatch.setattr(parquet_io, "read_spans", real_spans)
    return len(series), len(spans)


def test_a_clean_stop_leaves_a_checkpoint_of_everything_flushed(tmp_path, monkeypatch):
    """A few series past the last checkpoint are under what is worth a checkpoint while running, but a clean stop
    saves them: the next start reads no series or spans file (at the seed's scale the last tenth of the series was
    2 s of a restart, and each spans file names every series of its flush)."""
    st = Storage(str(tmp_path))
    st.open()
    try:
        _fifty_then_three_more(st)  # under a tenth, too few files: no new checkpoint
        assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 50
    finally:
        st.close(flush=True)
    assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 53
    assert _restart_reads(tmp_path, monkeypatch) == (0, 0)


def test_flushes_of_known_series_are_checkpointed_once_their_spans_files_pile_up(tmp_path, monkeypatch):
    """No new series, but every flush writes a spans file a restart would read: after UNCOVERED_SIDE_FILES of
    them the flusher's checkpoint covers them."""
    from metricsgw.storage.catalog import book

    st = Storage(str(tmp_path))
    st.open()
    try:
        asyncio.run(st.append(batch(range(53), [NOW] * 53, [1.0] * 53)))
        st.flush()
        covered = catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[1]
        for k in range(1, book.UNCOVERED_SIDE_FILES + 1):
            st.book._last_save -= 3600  # the CPU share's wait after the last save, passed
            asyncio.run(st.append(batch(range(53), [NOW + 1000 * k] * 53, [2.0] * 53)))
            st.flush()
            now_covered = catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[1]
            assert (now_covered > covered) == (k == book.UNCOVERED_SIDE_FILES)
    finally:
        st.close(flush=False)
    assert _restart_reads(tmp_path, monkeypatch) == (0, 0)


def test_checkpoints_for_what_a_restart_would_redo_keep_to_their_share_of_a_core(tmp_path, monkeypatch):
    """A checkpoint for a few series or side files waits CPU_SHARE's multiple of what the last one took (at 2.7M
    series ~55 s: pod churn's series would have one at every flush); what is past it comes back from the files or
    the WAL meanwhile. A table grown by a tenth (a young gateway's) is checkpointed whatever it costs."""
    from metricsgw.storage.catalog import book

    monkeypatch.setattr(book, "CPU_SHARE", 1e-9)  # any checkpoint's cost is then a wait far longer than the test
    monkeypatch.setattr(book, "SETTLED_CPU_SHARE", 1e-9)
    st = Storage(str(tmp_path))
    st.open()
    try:
        asyncio.run(st.append(batch(range(53), [NOW] * 53, [1.0] * 53)))
        st.flush()  # the first one: no wait before it
        covered = catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[1]
        for k in range(1, book.UNCOVERED_SIDE_FILES + 2):
            asyncio.run(st.append(batch(range(53), [NOW + 1000 * k] * 53, [2.0] * 53)))
            st.flush()  # spans files enough for one, but too soon after the first
        assert catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[1] == covered
        asyncio.run(st.append(batch(range(53, 106), [NOW + 9000] * 53, [3.0] * 53)))
        st.flush()  # doubled: saved at once
        assert len(catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[0]) == 106
        asyncio.run(st.append(batch(range(106), [NOW + 10_000] * 106, [4.0] * 106)))
        st.flush()  # a spans file past it
        covered = catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[1]
    finally:
        st.close(flush=True)  # a clean stop saves anyway
    assert catalog_checkpoint.load(str(tmp_path / "wal" / "gw0"))[1] > covered


def test_a_burst_of_new_series_is_checkpointed_once_it_is_over(tmp_path, monkeypatch):
    """Series past the last checkpoint, too few to have grown the table by a tenth: while more keep coming the next
    checkpoint waits its CPU_SHARE, but once none came since the last look it is written at SETTLED_CPU_SHARE (a
    restart after a big scrape's new series then does not split them all again)."""
    from metricsgw.storage.catalog import book

    monkeypatch.setattr(book, "CPU_SHARE", 1e-9)  # while growing: a wait far longer than the test
    monkeypatch.setattr(book, "SETTLED_CPU_SHARE", float("inf"))  # settled: no wait
    monkeypatch.setattr(book, "UNCOVERED_SERIES", 20)
    wal_dir = str(tmp_path / "wal" / "gw0")
    st = Storage(str(tmp_path))
    st.open()
    try:
        asyncio.run(st.append(batch(range(500), [NOW] * 500, [1.0] * 500)))
        st.flush()  # grown from nothing: saved at once
        assert len(catalog_checkpoint.load(wal_dir)[0]) == 500
        asyncio.run(st.append(batch(range(500, 530), [NOW] * 30, [1.0] * 30)))  # 6%: not a tenth
        st.book.checkpoint()  # series came since the last look: still growing
        assert len(catalog_checkpoint.load(wal_dir)[0]) == 500
        st.book.checkpoint()  # none since: the burst is over
        assert len(catalog_checkpoint.load(wal_dir)[0]) == 530
    finally:
        st.close(flush=False)
