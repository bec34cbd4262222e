"""Who writes the WAL segment: the writer thread (``submit``) or the appending thread (``write_here``, when the
writer is idle and writes are quick). Either way one writes at a time and records land in the order they were
given, each on disk before its caller hears back."""

from __future__ import annotations

import os
import threading

import pytest

from metricsgw.storage.wal import wal as wal_module
from metricsgw.storage.wal.wal import WAL, list_segments, read_segment, segment_name


class _Bytes:
    """An encoder writing each record as it is (records here are bytes)."""

    def encode(self, record: bytes) -> bytes:
        return record


@pytest.fixture
def quick(monkeypatch):
    """Every write counts as quick, whatever this machine's disk does now (no test depends on speed)."""
    monkeypatch.setattr(wal_module, "INLINE_WRITE_S", float("inf"))


def _records(wal_dir: str) -> list[bytes]:
    return [r for s in list_segments(wal_dir) for r in read_segment(os.path.join(wal_dir, segment_name(s)))]


def test_an_idle_wal_writes_on_the_callers_thread(tmp_path, quick):
    wal = WAL(str(tmp_path), 1 << 20, _Bytes)
    try:
        writers = []
        assert wal.write_here(b"one") == (None,)
        assert wal.write_here(b"two") == (None,)
        done = threading.Event()
        wal.submit(b"three", lambda err: (writers.append(threading.current_thread().name), done.set()))
        assert done.wait(10) and writers == ["wal-writer"]
    finally:
        wal.close()
    assert _records(str(tmp_path)) == [b"one", b"two", b"three"]


def test_while_the_writer_thread_has_work_a_record_waits_its_turn(tmp_path, quick):
    wal = WAL(str(tmp_path), 1 << 20, _Bytes)
    try:
        release, answered = threading.Event(), []
        # The writer thread is busy until ``release``: its record is written, its caller not yet told.
        wal.submit(b"first", lambda err: (release.wait(10), answered.append(("first", err))))
        assert wal.write_here(b"second") is None  # not taken: the segment is the writer's now
        told = threading.Event()
        wal.submit(b"second", lambda err: (answered.append(("second", err)), told.set()))
        release.set()
        assert told.wait(10)
        assert wal.write_here(b"third") == (None,)  # idle again
    finally:
        wal.close()
    assert answered == [("first", None), ("second", None)]
    assert _records(str(tmp_path)) == [b"first", b"second", b"third"]


def test_after_a_slow_write_records_go_to_the_writer_thread_which_groups_them(tmp_path, monkeypatch):
    monkeypatch.setattr(wal_module, "INLINE_WRITE_S", -1.0)  # every write "slow"
    wal = WAL(str(tmp_path), 1 << 20, _Bytes)
    try:
        assert wal.write_here(b"x") is None
        done = threading.Event()
        wal.submit(b"x", lambda err: done.set())
        assert done.wait(10)
    finally:
        wal.close()
    assert _records(str(tmp_path)) == [b"x"]


def test_a_full_segment_is_closed_by_whoever_wrote_last(tmp_path, quick):
    wal = WAL(str(tmp_path), 64, _Bytes)
    try:
        for i in range(5):
            assert wal.write_here(b"r%02d" % i + bytes(60)) == (None,)
    finally:
        wal.close()
    assert len(list_segments(str(tmp_path))) == 5
    assert [r[:3] for r in _records(str(tmp_path))] == [b"r%02d" % i for i in range(5)]


@pytest.mark.parametrize("fsync", [True, False])
def test_without_fsync_records_are_written_and_synced_when_their_segment_closes(tmp_path, quick, monkeypatch, fsync):
    """--storage.wal-fsync=false: a record is acknowledged once written (readable by the next process, as after
    kill -9), with no fdatasync of its own; its segment is synced when it is closed."""
    from metricsgw.storage.wal import segment_file

    syncs = []
    monkeypatch.setattr(segment_file, "_sync_data", lambda fd: syncs.append(fd))
    wal = WAL(str(tmp_path), 64, _Bytes, fsync=fsync)
    try:
        for i in range(3):
            assert wal.write_here(b"r%02d" % i) == (None,)
        assert [r[:3] for r in _records(str(tmp_path))] == [b"r00", b"r01", b"r02"]  # written before any close
        assert len(syncs) == (3 if fsync else 0)
        assert wal.write_here(b"r03" + bytes(60)) == (None,)  # fills the segment: it is closed
        assert len(syncs) == (4 if fsync else 1)
    finally:
        wal.close()
