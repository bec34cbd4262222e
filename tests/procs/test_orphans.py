"""Which WALs the front flushes before its children start (procs/orphans.py), on real directories."""

from __future__ import annotations

from metricsgw.config import load
from metricsgw.procs.layout import Layout
from metricsgw.procs.orphans import orphaned_writers


def _wal(root, writer: str, records: bool) -> None:
    d = root / "wal" / writer
    d.mkdir(parents=True)
    (d / "00000001.wal").write_bytes(b"x" if records else b"")


def test_this_gateways_writers_with_records_that_no_shard_of_the_layout_replays(tmp_path):
    cfg = load({"storage.path": str(tmp_path), "storage.writer-id": "gw0"})
    for writer, records in [("gw0", True), ("gw0-s0", True), ("gw0-s1", True), ("gw0-s2", True),
                            ("gw0-s3", False), ("gw0-q0", True), ("gw1", True), ("gw0x-s5", True)]:
        _wal(tmp_path, writer, records)
    two = Layout(shards=2, queriers=1, run_dir=str(tmp_path / "run"))
    # gw0 (one process / one shard) and gw0-s2 (a third shard) hold records; gw0-s3's WAL is empty; the
    # querier's and other gateways' writers are not ours to replay.
    assert orphaned_writers(cfg, two) == ["gw0", "gw0-s2"]
    one = Layout(shards=1, queriers=1, run_dir=str(tmp_path / "run"))
    assert orphaned_writers(cfg, one) == ["gw0-s0", "gw0-s1", "gw0-s2"]  # one shard is writer gw0 itself


def test_nothing_written_yet(tmp_path):
    assert orphaned_writers(load({"storage.path": str(tmp_path)}), Layout(2, 1, str(tmp_path))) == []
