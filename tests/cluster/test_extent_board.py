"""The extent board (cluster/extent_board.py): the record a shard writes in place and its query processes read, and
the span the storage publishes to it (storage/memory/memory_span.py): wide enough before a write is acknowledged, narrowed
only with the version of the flush that committed what left memory."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from metricsgw.cluster import extent_board
from metricsgw.cluster.extent_board import UNKNOWN, BoardReader, BoardWriter, Extent
from metricsgw.model import canonical, series_id
from metricsgw.storage.batch import AppendBatch, NativeSamples
from metricsgw.storage.store import Storage
from tests.storage.test_storage import NOW, batch, read_all

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
EMPTY = (I64_MAX, I64_MIN)


def test_a_new_board_is_unknown_and_unknown_misses_nothing(tmp_path):
    path = str(tmp_path / "shard-0.extent")
    BoardWriter(path)
    got = BoardReader(path).read()
    assert got == UNKNOWN
    assert not got.misses(I64_MIN, I64_MIN) and not got.misses(I64_MAX, I64_MAX)


def test_misses_is_disjointness_and_an_empty_memory_misses_every_window():
    held = Extent(1000, 2000, 7)
    assert held.misses(0, 999) and held.misses(2001, 5000)
    assert not held.misses(0, 1000) and not held.misses(2000, 3000) and not held.misses(1500, 1500)
    assert not held.misses(0, 10_000)  # a window around the span
    empty = Extent(*EMPTY, 7)
    assert empty.misses(0, 10**15) and empty.misses(-(10**15), 0)


def test_the_reader_sees_each_publish_and_a_torn_record_reads_as_unknown(tmp_path):
    path = str(tmp_path / "shard-0.extent")
    writer, reader = BoardWriter(path), BoardReader(path)
    writer.publish(10, 20, 3)
    assert reader.read() == Extent(10, 20, 3)
    writer.publish(*EMPTY, 4)
    assert reader.read() == Extent(*EMPTY, 4)
    with open(path, "r+b") as f:  # half of a record written over the other: the CRC no longer matches
        f.seek(8)
        f.write((5).to_bytes(8, "little", signed=True))
    assert reader.read() is None


def test_a_missing_board_reads_as_none_and_a_board_made_again_is_mapped_again(tmp_path):
    path = str(tmp_path / "shard-0.extent")
    reader = BoardReader(path)
    assert reader.read() is None
    BoardWriter(path).publish(1, 2, 1)
    assert reader.read() == Extent(1, 2, 1)
    os.unlink(path)  # a run directory made again: a new file, which the reader must follow
    BoardWriter(path).publish(5, 6, 2)
    assert reader.read() == Extent(5, 6, 2)


def test_a_restarted_shard_writes_in_place_so_every_reader_keeps_its_file(tmp_path):
    path = str(tmp_path / "shard-0.extent")
    BoardWriter(path).publish(*EMPTY, 9)
    inode = os.stat(path).st_ino
    reader = BoardReader(path)
    assert reader.read() == Extent(*EMPTY, 9)
    BoardWriter(path)  # the successor starts: UNKNOWN until its WAL is replayed, in the same file
    assert os.stat(path).st_ino == inode
    assert reader.read() == UNKNOWN


def test_path_for_a_shard_socket():
    assert extent_board.path_for("/run/gw0/shard-1.sock") == "/run/gw0/shard-1.extent"


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, lo: int, hi: int, version: int) -> None:
        self.calls.append((lo, hi, version))


def _storage(path, sink: Sink, **kw) -> Storage:
    st = Storage(str(path), **kw)
    st.extent_sink = sink
    st.open()
    return st


def test_storage_publishes_once_ready_then_widens_before_each_write_returns(tmp_path):
    sink = Sink()
    st = Storage(str(tmp_path))
    asyncio.run(_replayed_write(tmp_path))  # a WAL to replay: nothing is published while it is
    st.extent_sink = sink
    st.open()
    assert sink.calls == [(NOW, NOW + 5000, st.table.current.table_version)]

    async def write():
        await st.append(batch([0], [NOW - 60_000], [1.0], new=False))
        assert sink.calls[-1][:2] == (NOW - 60_000, NOW + 5000)  # before append returned: before the 204
        await st.append(batch([0], [NOW + 60_000], [2.0], new=False))
        assert sink.calls[-1][:2] == (NOW - 60_000, NOW + 60_000)

    asyncio.run(write())
    st.close(flush=False)


async def _replayed_write(path) -> None:
    st = Storage(str(path))
    st.open()
    await st.append(batch([0, 1], [NOW, NOW + 5000], [1.0, 2.0]))
    st.close(flush=False)


def test_a_flush_publishes_empty_memory_with_the_version_that_holds_it(tmp_path):
    sink = Sink()
    st = _storage(tmp_path, sink)
    asyncio.run(st.append(batch([0, 1], [NOW, NOW + 1000], [1.0, 2.0])))
    before = st.table.current.table_version
    st.flush()
    lo, hi, version = sink.calls[-1]
    assert (lo, hi) == EMPTY
    assert version == st.table.current.table_version > before
    assert [t for _, t, _ in read_all(st)] == [0, 1000]  # what left memory is in the table at that version
    st.close(flush=False)


def test_histograms_and_exemplars_widen_the_span(tmp_path):
    sink = Sink()
    st = _storage(tmp_path, sink)
    lb = canonical([("__name__", "h")])
    sid = np.array([series_id(lb)], np.int64)
    nat = NativeSamples(sid, np.array([NOW - 7000], np.int64), [b"h"], sid, np.array([NOW + 9000], np.int64),
                        np.array([1.0]), [b""])
    asyncio.run(st.append(AppendBatch(new_series=[(int(sid[0]), lb)], native=nat)))
    assert sink.calls[-1][:2] == (NOW - 7000, NOW + 9000)
    st.close(flush=False)


def test_a_failed_flush_keeps_the_span(tmp_path, monkeypatch):
    sink = Sink()
    st = _storage(tmp_path, sink)
    asyncio.run(st.append(batch([0], [NOW], [1.0])))
    held = sink.calls[-1]

    def broken(*a, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(st.head_flush, "_write_snapshot", broken)
    with pytest.raises(OSError):
        st.flush()
    assert sink.calls[-1] == held  # the snapshot is still in memory: the span still covers it
    st.close(flush=False)
