"""A WAL segment zero-filled ahead of its records: replay ends at the zeros a dead writer left, a torn record before
them is still torn, a clean close cuts them off, and a disk without room for the zeros still takes the records."""

from __future__ import annotations

import logging
import os
import struct
import zlib

from metricsgw.storage.wal import segment_file
from metricsgw.storage.wal.segment_file import SegmentFile
from metricsgw.storage.wal.wal import read_segment
from tests.storage.tmpfs import fill, small_tmpfs


def _record(payload: bytes) -> bytes:
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def test_a_dead_writers_zeros_end_the_segment_cleanly(tmp_path, caplog):
    path = str(tmp_path / "00000001.wal")
    seg = SegmentFile(path, limit=64 << 20)
    seg.append(_record(b"one"))
    assert os.path.getsize(path) == 11 + segment_file.FILL_BYTES  # the zeros are on disk ahead of the records
    seg.append(_record(b"two"))  # written over them: the file keeps its length
    assert os.path.getsize(path) == 11 + segment_file.FILL_BYTES
    os.close(seg.fd)  # the writer dies: nothing cuts the zeros off
    with caplog.at_level(logging.WARNING):
        assert list(read_segment(path)) == [b"one", b"two"]
    assert "torn" not in caplog.text
    assert os.path.getsize(path) == 2 * 8 + 6


def test_a_torn_record_before_the_zeros_is_still_torn(tmp_path, caplog):
    path = str(tmp_path / "00000001.wal")
    seg = SegmentFile(path, limit=64 << 20)
    seg.append(_record(b"kept"))
    good = seg.size
    seg.append(_record(b"torn by the crash")[:-3])  # written in part when the machine went down
    os.close(seg.fd)
    with caplog.at_level(logging.WARNING):
        assert list(read_segment(path)) == [b"kept"]
    assert "torn record" in caplog.text
    assert os.path.getsize(path) == good


def test_a_closed_segment_holds_its_records_only(tmp_path):
    path = str(tmp_path / "00000001.wal")
    seg = SegmentFile(path, limit=64 << 20)
    seg.append(_record(b"x" * 100))
    seg.sync()
    seg.close()
    assert os.path.getsize(path) == 108
    assert list(read_segment(path)) == [b"x" * 100]


def test_no_zeros_past_the_segments_size(tmp_path):
    seg = SegmentFile(str(tmp_path / "00000001.wal"), limit=1000)
    seg.append(_record(b"y" * 500))
    assert seg.filled == 1000  # a segment is started anew once its records pass its size
    seg.append(_record(b"y" * 600))
    assert seg.filled == seg.size == 1116
    seg.close()


def test_a_disk_without_room_for_the_zeros_still_takes_the_records(tmp_path):
    with small_tmpfs(tmp_path / "mnt", "4m") as disk:
        spare = disk / "spare"
        spare.write_bytes(bytes(64 << 10))
        fill(disk / "filler")
        spare.unlink()  # 64 KiB of room: the record fits, a MiB of zeros after it does not
        path = str(disk / "00000001.wal")
        seg = SegmentFile(path, limit=64 << 20)
        seg.append(_record(b"z" * 10_000))
        seg.sync()
        assert seg.size == 10_008
        os.close(seg.fd)
        assert list(read_segment(path)) == [b"z" * 10_000]
