"""A full disk, for real (a small tmpfs): writes are refused while the WAL cannot be written,
the storage says why, recovers by itself when space comes back, and a failed flush leaves
nothing half-written and loses nothing."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from metricsgw.errors import Unavailable
from metricsgw.storage.store import Storage
from metricsgw.storage.wal import segment_file
from metricsgw.telemetry import Telemetry
from tests.storage.test_storage import NOW, batch, read_all
from tests.storage.tmpfs import fill, small_tmpfs


def _wait_for(cond, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.05)


def _leftovers(root) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".tmp")]


@pytest.fixture
def disk(tmp_path):
    with small_tmpfs(tmp_path / "mnt", "4m") as where:
        yield where


def test_full_disk_refuses_writes_says_why_and_recovers(disk):
    tel = Telemetry()
    st = Storage(str(disk / "data"), telemetry=tel)
    st.open()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(st.append(batch(range(10), [NOW] * 10, [1.0] * 10)))
        acked = {(str(i), dt, v) for i in range(10) for dt, v in ((0, 1.0), (3000, 4.0))}  # the 4.0s come later
        filler = disk / "filler"
        fill(filler)
        # The segment's zero-filled room (segment_file.py) takes the first writes after the disk is full; a write
        # past that room finds the disk full.
        for k in range(1, 400):
            try:
                loop.run_until_complete(st.append(batch(range(100, 5000), [NOW + k] * 4900, [2.0] * 4900)))
            except Unavailable:
                break
            acked |= {(str(i), k, 2.0) for i in range(100, 5000)}
        else:
            raise AssertionError("no write found the disk full")
        reason = st.not_ready_reason()
        assert reason and "No space left" in reason, reason
        with pytest.raises(Unavailable, match="WAL cannot be written"):  # refused at once now
            loop.run_until_complete(st.append(batch(range(10), [NOW + 2000] * 10, [3.0] * 10, new=False)))
        assert tel.storage_writable._value.get() == 0
        assert tel.wal_write_failures._value.get() >= 1
        filler.unlink()  # space comes back: the WAL's probe notices within a second or so
        _wait_for(lambda: st.not_ready_reason() is None, "the WAL to be writable again")
        assert tel.storage_writable._value.get() == 1
        loop.run_until_complete(st.append(batch(range(10), [NOW + 3000] * 10, [4.0] * 10, new=False)))
        st.flush()
    finally:
        st.close()
        loop.close()
    assert not _leftovers(disk)
    got = sorted(_reopened_samples(disk))
    # the refused writes may be stored or not (they were answered 503); the acknowledged ones exactly once
    assert acked <= set(got) and len(got) == len(set(got))


def _reopened_samples(disk) -> list:
    """Every sample a fresh Storage on the disk's data directory reads (what a restart serves)."""
    st = Storage(str(disk / "data"))
    st.open()
    try:
        return read_all(st)
    finally:
        st.close(flush=False)


@pytest.fixture
def no_zero_fill(monkeypatch):
    """Segments written without zeros ahead (segment_file.py), so the disk is full at once: the room a segment
    keeps would take the next writes, and cutting it off at a flush would give the flush room."""
    monkeypatch.setattr(segment_file, "FILL_BYTES", 0)


def test_failed_flush_leaves_no_partial_file_and_retries_whole(disk, no_zero_fill):
    st = Storage(str(disk / "data"))
    st.open()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(st.append(batch(range(300), [NOW] * 300, [float(i) for i in range(300)])))
        st.flush()
        loop.run_until_complete(st.append(batch(range(300, 600), [NOW + 1000] * 300, [1.0] * 300)))
        before = sorted(os.listdir(disk / "data" / "table" / "samples" / f"hour={NOW // 3600_000 * 3600_000}"))
        filler = disk / "filler"
        fill(filler)
        with pytest.raises(OSError):
            st.flush()
        assert not _leftovers(disk)
        assert sorted(os.listdir(disk / "data" / "table" / "samples" / f"hour={NOW // 3600_000 * 3600_000}")) == before
        assert len(read_all(st)) == 600  # the snapshot that failed to flush is still read from memory
        filler.unlink()
        st.flush()  # retries the snapshot left over
        assert not st.files.flushing() and len(read_all(st)) == 600
    finally:
        st.close()
        loop.close()
    st = Storage(str(disk / "data"))
    st.open()
    try:
        got = read_all(st)
        assert len(got) == 600 and len(set(got)) == 600
    finally:
        st.close(flush=False)


def test_new_series_of_a_failed_write_are_defined_by_its_retry(disk, no_zero_fill):
    # The first write of these series fails (disk full: 503), but storage has registered them by then, so
    # the sender's retry carries no series key (the pipeline finds them known). The retry is acknowledged:
    # after a restart with nothing flushed, its samples must be there (replay used to meet samples of
    # series no WAL record defined, and storage failed to open).
    st = Storage(str(disk / "data"))
    st.open()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(st.append(batch(range(10), [NOW] * 10, [1.0] * 10)))
        fill(disk / "filler")
        with pytest.raises(Unavailable):
            loop.run_until_complete(st.append(batch(range(100, 5000), [NOW + 1000] * 4900, [2.0] * 4900)))
        (disk / "filler").unlink()
        _wait_for(lambda: st.not_ready_reason() is None, "the WAL to be writable again")
        loop.run_until_complete(st.append(batch(range(100, 5000), [NOW + 1000] * 4900, [2.0] * 4900, new=False)))
        loop.run_until_complete(st.append(batch(range(100, 5000), [NOW + 2000] * 4900, [3.0] * 4900, new=False)))
        assert len(st.undurable) == 0  # defined on disk now: later writes carry nothing extra
    finally:
        st.close(flush=False)  # nothing flushed: the restart replays the WAL
        loop.close()
    got = set(_reopened_samples(disk))
    assert {(str(i), 1000, 2.0) for i in range(100, 5000)} <= got
    assert {(str(i), 2000, 3.0) for i in range(100, 5000)} <= got
