"""The table (storage/files/table.py) on real files: this writer's file sequence restarts above its files, files
removed by compaction and retention are deleted only once no running query holds them and the vacuum
delay has passed, failures of compaction, retention and side-table merges leave no partial file and are
retried, a follower catches up to a table version, and the Delta log is checkpointed."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import numpy as np
import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher, canonical, series_id
from metricsgw.storage.batch import AppendBatch
from metricsgw.storage.upkeep.compact import MAX_SIDE_FILES, compact_partitions, compact_side_tables
from metricsgw.storage.files.table import Table
from metricsgw.storage.files.parquet_io import read_series, write_series
from metricsgw.storage.store import Storage
from metricsgw.telemetry import Telemetry

HOUR = 3600_000
NOW = int(time.time() * 1000) // 1000 * 1000


def one_series(i: int = 0, metric: str = "m"):
    lb = canonical([("__name__", metric), ("i", str(i))])
    return series_id(lb), lb


def append(st: Storage, series: list, t_ms: int, value: float) -> None:
    new = [(sid, lb) for sid, lb in series if not st.has_series(sid)]
    sids = np.array([sid for sid, _ in series], np.int64)
    asyncio.run(st.append(AppendBatch(new_series=new, sid=sids, t=np.full(len(sids), t_ms, np.int64),
                                      v=np.full(len(sids), value))))


def opened(path, **kw) -> Storage:
    st = Storage(str(path), **kw)
    st.open()
    return st


def read_all(st: Storage, start_ms: int, end_ms: int, ctx: QueryContext | None = None):
    ss = st.select_series([Matcher("__name__", "=~", ".+")], start_ms, end_ms, QueryContext())
    b = st.read_samples(ss.ids, start_ms, end_ms, ctx or QueryContext())
    return b.sid.tolist(), b.t.tolist(), b.v.tolist()


def failures(tel: Telemetry) -> float:
    return tel.registry.get_sample_value("metricsgw_compaction_failures_total") or 0.0


def test_restart_then_side_table_compaction_keeps_every_span(tmp_path):
    """Finding 1, reproduced: spans files took numbers from the sequence but start-up rebuilt it from
    part- and series- names only. After a restart, the merge of 17 spans files was named like the newest
    one, overwrote it, and was deleted with the inputs: select_series over the window found nothing."""
    series = [one_series()]
    st = opened(tmp_path)
    for k in range(MAX_SIDE_FILES + 1):  # the last flushes bring no new series: a spans file is the newest
        append(st, series, NOW + k * 1000, float(k))
        st.flush()
    st.close(flush=False)

    st = opened(tmp_path)
    assert compact_side_tables(st) == MAX_SIDE_FILES + 1
    st.table.collect()
    assert len(list((tmp_path / "table" / "spans" / "writer=gw0").glob("spans-*.parquet"))) == 1
    st.close(flush=False)

    st = opened(tmp_path)
    ss = st.select_series([Matcher("__name__", "=", "m")], NOW, NOW + 20_000, QueryContext())
    assert ss.ids.tolist() == [series[0][0]]
    _, t, v = read_all(st, NOW, NOW + 20_000)
    flushes = range(MAX_SIDE_FILES + 1)
    assert t == [NOW + k * 1000 for k in flushes] and v == [float(k) for k in flushes]
    st.close()


def test_the_sequence_restarts_above_every_kind_of_file(tmp_path):
    """Also above this writer's files the table does not list (a crash mid-flush left them): a new file is
    never named like one on disk. Another writer's numbers are its own."""
    spans, series = tmp_path / "table" / "spans" / "writer=gw0", tmp_path / "table" / "series" / "writer=gw0"
    for d in (spans, series, tmp_path / "table" / "spans" / "writer=gw1"):
        d.mkdir(parents=True)
    fs = Table(str(tmp_path))
    (spans / "spans-gw0-00000009.parquet").write_bytes(b"")  # only its name matters here
    (series / "series-gw0-00000005.parquet").write_bytes(b"")
    (tmp_path / "table" / "spans" / "writer=gw1" / "spans-gw1-00000077.parquet").write_bytes(b"")
    (spans / "spans-gw0-00000010.parquet.tmp").write_bytes(b"half")  # a crash mid-write
    assert fs.open() == 1
    assert not (spans / "spans-gw0-00000010.parquet.tmp").exists()
    with fs.transaction() as tx:
        for kind in ("series", "spans"):
            path, seq = tx.new_path(kind)
            assert 9 < seq < 77 and path.endswith(f"-gw0-{seq:08d}.parquet")
    assert fs.collect() == 2, "the two files no commit lists are collected (the vacuum delay is 0 here)"
    assert (tmp_path / "table" / "spans" / "writer=gw1" / "spans-gw1-00000077.parquet").exists(), "not ours"


def test_a_retired_file_is_deleted_only_when_no_pinned_snapshot_lists_it(tmp_path):
    st = opened(tmp_path)
    series = [one_series(i) for i in range(3)]
    for k in range(3):
        append(st, series, NOW - 3 * HOUR + k * 1000, float(k))
        st.flush()
    inputs = [f.path for f in st.table.current.samples]
    older = st.table.pin()  # a query reading the three files
    assert compact_partitions(st) == 1
    newer = st.table.pin()  # a query that started after the compaction reads only its output
    assert len(newer.snapshot.samples) == 1 and newer.snapshot.samples[0].path not in inputs
    assert st.table.collect() == 0 and all(tmp_path.joinpath(p).exists() for p in inputs)
    newer.release()
    assert st.table.collect() == 0, "the older reader still holds them"
    older.release()
    assert st.table.collect() == 3 and not any(tmp_path.joinpath(p).exists() for p in inputs)
    assert st.table.retired == 0
    st.close()


class HeldQuery(QueryContext):
    """A query that stops inside its Parquet read until released (a test hook, no timing)."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def check(self, stage: str) -> None:
        if stage == "parquet read" and not self.inside.is_set():
            self.inside.set()
            assert self.go_on.wait(60), "the test never released the query"
        super().check(stage)


def test_compaction_and_retention_wait_for_a_running_query(tmp_path):
    clock = [NOW / 1000]
    st = opened(tmp_path, partition_ms=HOUR, retention_ms=2 * HOUR, clock=lambda: clock[0])
    series = [one_series(i) for i in range(4)]
    old_t, recent_t = NOW - 5 * HOUR, NOW - 30 * 60_000
    for k in range(2):
        append(st, series, old_t + k * 1000, float(k))
        append(st, series, recent_t + k * 1000, float(10 + k))
        st.flush()
    files = [f.path for f in st.table.current.samples]
    assert len(files) == 4
    want = read_all(st, 0, NOW)

    ctx = HeldQuery()
    got: list = []
    reader = threading.Thread(target=lambda: got.append(read_all(st, 0, NOW, ctx)))
    reader.start()
    assert ctx.inside.wait(60)
    st.maintenance.run()  # retention retires the old partition, compaction the two recent files
    assert not st.maintenance.failing
    assert len(st.table.current.samples) == 1
    assert st.table.collect() == 0 and all(tmp_path.joinpath(p).exists() for p in files)
    ctx.go_on.set()
    reader.join(60)
    assert got == [want], "the held query read every file it started with"
    assert st.table.collect() == 4 and not any(tmp_path.joinpath(p).exists() for p in files)
    assert not list(tmp_path.glob(f"samples/hour={old_t // HOUR * HOUR}")), "the emptied partition directory went"
    st.close()


def corrupt(path) -> bytes:
    """Truncate a Parquet file (as a bad disk or a stray writer would); returns the original bytes."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return data


def test_failing_compaction_leaves_no_file_is_counted_logged_once_and_retried(tmp_path, caplog):
    tel = Telemetry()
    st = opened(tmp_path, telemetry=tel)
    series = [one_series(i) for i in range(3)]
    for k in range(2):
        append(st, series, NOW - 3 * HOUR + k * 1000, float(k))
        st.flush()
    files = sorted(tmp_path.glob("table/samples/hour=*/*.parquet"))
    good = corrupt(files[1])
    with caplog.at_level(logging.INFO, logger="metricsgw.storage"):
        for attempt in range(3):
            st.maintenance.run()
            assert sorted(tmp_path.glob("table/samples/hour=*/*")) == files, "no new or partial file"
            assert failures(tel) == attempt + 1
    assert [r.levelname for r in caplog.records if "compaction failed" in r.getMessage()] == ["ERROR"]
    files[1].write_bytes(good)  # the cause goes away
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="metricsgw.storage"):
        st.maintenance.run()
    assert failures(tel) == 3 and not st.maintenance.failing
    assert any("compaction works again" in r.getMessage() for r in caplog.records)
    st.table.collect()
    assert len(list(tmp_path.glob("table/samples/hour=*/*.parquet"))) == 1
    assert sorted(read_all(st, 0, NOW)[1]) == sorted([NOW - 3 * HOUR, NOW - 3 * HOUR + 1000] * 3)
    st.close()


def test_failing_side_table_merge_leaves_no_file_and_is_retried(tmp_path):
    tel = Telemetry()
    st = opened(tmp_path, telemetry=tel)
    series = [one_series()]
    for k in range(MAX_SIDE_FILES):
        append(st, series, NOW + k * 1000, float(k))
        st.flush()
    spans = sorted((tmp_path / "table" / "spans" / "writer=gw0").iterdir())
    good = corrupt(spans[3])
    st.maintenance.run()
    assert sorted((tmp_path / "table" / "spans" / "writer=gw0").iterdir()) == spans and failures(tel) == 1
    assert list(st.maintenance.failing) == ["side-table compaction"]
    spans[3].write_bytes(good)
    st.maintenance.run()
    st.table.collect()
    assert len(list((tmp_path / "table" / "spans" / "writer=gw0").iterdir())) == 1 and not st.maintenance.failing
    st.close()


def test_close_waits_for_running_reads_before_closing_duckdb(tmp_path):
    st = opened(tmp_path)
    series = [one_series(i) for i in range(3)]
    append(st, series, NOW - 3 * HOUR, 1.0)
    st.flush()
    ctx = HeldQuery()
    got: list = []
    reader = threading.Thread(target=lambda: got.append(read_all(st, 0, NOW, ctx)))
    reader.start()
    assert ctx.inside.wait(60)  # the read holds its snapshot and has not run its DuckDB query yet
    closer = threading.Thread(target=st.close)
    closer.start()
    for _ in range(6000):  # bounded: until close() has stopped admitting reads
        if st.table.closing:
            break
        time.sleep(0.01)
    assert st.table.closing
    with pytest.raises(Exception, match="shutting down"):
        st.table.pin()
    assert closer.is_alive(), "close() waits for the running read"
    ctx.go_on.set()
    reader.join(60)
    closer.join(60)
    assert not closer.is_alive()
    assert got and got[0][2] == [1.0] * 3, "the read finished on an open DuckDB"


def test_failing_retention_rewrite_is_retried_and_purges_the_dropped_series(tmp_path):
    tel = Telemetry()
    clock = [NOW / 1000]
    st = opened(tmp_path, partition_ms=HOUR, retention_ms=2 * HOUR, clock=lambda: clock[0], telemetry=tel)
    old, kept = [one_series(i) for i in range(3)], [one_series(i) for i in range(3, 5)]
    append(st, old, NOW - 5 * HOUR, 1.0)
    st.flush()
    append(st, kept, NOW - 10 * 60_000, 2.0)
    st.flush()
    series_files = sorted((tmp_path / "table" / "series" / "writer=gw0").iterdir())
    good = corrupt(series_files[0])
    st.maintenance.run()
    assert list(st.maintenance.failing) == ["retention"] and failures(tel) == 1
    assert not any(st.has_series(s) for s, _ in old), "dropped from memory at once"
    assert sorted((tmp_path / "table" / "series" / "writer=gw0").iterdir()) == series_files, "no partial rewrite"
    series_files[0].write_bytes(good)
    st.maintenance.run()  # nothing new to drop: the remembered rewrite is retried
    st.table.collect()
    assert not st.maintenance.failing
    sids, _ = read_series([str(p) for p in (tmp_path / "table" / "series" / "writer=gw0").iterdir()])
    assert sorted(sids.tolist()) == sorted(s for s, _ in kept)
    st.close()


def test_a_failed_flush_leaves_no_file_and_the_next_flush_writes_its_samples(tmp_path):
    st = opened(tmp_path)
    first, second = [one_series(i) for i in range(2)], [one_series(i, "n") for i in range(2)]
    t1 = NOW - 3 * HOUR  # its partition directory cannot be made: a file sits where it goes
    blocker = tmp_path / "table" / "samples" / f"hour={t1 // HOUR * HOUR}"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"")
    append(st, first, t1, 1.0)
    with pytest.raises(OSError):
        st.flush()
    assert [p for p in tmp_path.rglob("*.parquet*") if "_delta_log" not in p.parts] == [], "no partial file"
    assert read_all(st, 0, NOW)[2] == [1.0, 1.0], "still readable from memory"
    append(st, second, NOW - 60_000, 2.0)
    blocker.unlink()  # the cause goes away
    st.flush()
    assert st.files.flushing() == 0 and st.files.head_samples() == 0
    st.close(flush=False)
    st = opened(tmp_path)  # from the files alone: the WAL segments of both flushes are gone
    assert st.files.head_samples() == 0
    assert sorted(read_all(st, 0, NOW)[2]) == [1.0, 1.0, 2.0, 2.0]
    assert set(st.select_series([Matcher("__name__", "=~", ".+")], None, None).labels) == {
        lb for _, lb in first + second}
    st.close()


def test_a_removed_file_waits_for_the_vacuum_delay_and_for_local_pins(tmp_path):
    """Readers in other processes hold no pin here: the delay since the remove is what protects them."""
    now = [1000.0]
    table = Table(str(tmp_path), vacuum_delay_s=300, clock=lambda: now[0])
    table.open()
    with table.transaction() as tx:
        path, _ = tx.new_path("series")
        write_series(path, [(1, b"m\xfe")])
        tx.add_side("series", path)
        tx.commit()
    pin = table.pin()
    with table.transaction() as tx:
        tx.retire([path])
        tx.commit()
    assert path not in table.current.paths()
    now[0] += 299
    assert table.collect() == 0 and os.path.exists(path), "removed less than the delay ago"
    now[0] += 1
    assert table.collect() == 0 and os.path.exists(path), "a local reader still pins a version listing it"
    pin.release()
    assert table.collect() == 1 and not os.path.exists(path)
    table.close()


def test_a_follower_catches_up_to_a_table_version_and_a_shard_keeps_only_its_own_series(tmp_path):
    gw0, gw1 = opened(tmp_path, writer_id="gw0"), opened(tmp_path, writer_id="gw1")
    shard = None
    try:
        mine, theirs = [one_series(i) for i in range(3)], [one_series(i, "other") for i in range(2)]
        append(gw0, mine, NOW - 60_000, 1.0)
        gw0.flush()
        append(gw1, theirs, NOW - 60_000, 2.0)
        gw1.flush()
        v = gw1.table.current.table_version
        assert gw0.table.current.table_version < v, "gw0 has not loaded gw1's commit yet"
        gw0.ensure_version(v)
        assert gw0.table.current.table_version >= v
        assert sorted(read_all(gw0, 0, NOW)[2]) == [1.0] * 3 + [2.0] * 2, "gw1's series and samples joined"
        version_before = gw0.table.current.version
        gw0.ensure_version(v)  # already there: nothing reloaded
        assert gw0.table.current.version == version_before
        gw1.close()
        gw1 = None
        shard = opened(tmp_path, writer_id="gw1", follow_others=False)
        assert len(shard.catalog) == 2, "a shard loads only the series its own commits wrote"
        assert sorted(read_all(shard, 0, NOW)[2]) == [2.0] * 2
    finally:
        for st in (gw0, gw1, shard):
            if st is not None:
                st.close(flush=False)


def test_ensure_version_waits_for_a_follow_that_has_swapped_the_snapshot_but_not_loaded_its_series(tmp_path):
    """The periodic follow swaps the table snapshot, then reads the other writers' series into the catalog.
    A query asking for that version in between must wait, not select without those series (a querier
    answered only a shard's head, not its flushed series, under load)."""
    gw0, gw1 = opened(tmp_path, writer_id="gw0"), opened(tmp_path, writer_id="gw1")
    inside, release = threading.Event(), threading.Event()
    load_catalog = gw0.follower._join_catalog

    def slow_catalog(snap):  # the follow thread, held after the swap and before the series load
        inside.set()
        assert release.wait(60)
        load_catalog(snap)

    gw0.follower._join_catalog = slow_catalog
    try:
        theirs = [one_series(i, "other") for i in range(3)]
        append(gw1, theirs, NOW - 60_000, 2.0)
        gw1.flush()
        v = gw1.table.current.table_version
        follower = threading.Thread(target=gw0.follow)
        follower.start()
        assert inside.wait(60)
        assert gw0.table.current.table_version >= v, "the snapshot is already swapped"
        seen: list = []
        reader = threading.Thread(target=lambda: (gw0.ensure_version(v), seen.append(read_all(gw0, 0, NOW)[2])))
        reader.start()
        reader.join(2)  # without the wait, the read is over by now, without gw1's series
        release.set()
        follower.join(60)
        reader.join(60)
        assert seen == [[2.0] * 3]
    finally:
        release.set()
        gw0.close(flush=False)
        gw1.close(flush=False)


def test_the_log_is_checkpointed_so_opening_reads_few_entries(tmp_path):
    st = opened(tmp_path)
    series = [one_series()]
    for k in range(55):
        append(st, series, NOW - 3600_000 + k * 1000, float(k))
        st.flush()
    st.close()
    log = tmp_path / "table" / "samples" / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet")) and (log / "_last_checkpoint").exists()
    st = opened(tmp_path)
    try:
        assert len(read_all(st, 0, NOW)[1]) == 55
    finally:
        st.close(flush=False)


def test_a_restart_after_a_clean_stop_numbers_its_wal_above_the_committed_cut(tmp_path):
    """Found by tests/e2e/test_shared_table.py: a clean stop flushes and removes every WAL segment, and the
    next start numbered its segments from 1 again -- below or at the cut the table had committed. Killed
    before its first flush committed, the start after replayed none of them (they looked flushed) and the
    samples it had acknowledged were gone."""
    series = [one_series(i) for i in range(3)]
    st = opened(tmp_path)
    append(st, series, NOW, 1.0)
    st.close()  # flushes: the committed cut covers every segment so far, the WAL directory is empty
    st = opened(tmp_path)
    assert st.wal.current_segment > st.table.committed_wal_segment() > 0
    append(st, series, NOW + 1000, 2.0)
    st.close(flush=False)  # as kill -9 leaves it: the acknowledged samples are in the WAL only
    st = opened(tmp_path)
    try:
        sids, ts, vs = read_all(st, NOW - HOUR, NOW + HOUR)
        assert sorted(zip(sids, ts, vs)) == sorted([(sid, NOW, 1.0) for sid, _ in series]
                                                   + [(sid, NOW + 1000, 2.0) for sid, _ in series])
    finally:
        st.close(flush=False)
