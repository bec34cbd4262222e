"""A data dir written by the previous version (series table as JSON labels, A2 WAL records) opens,
replays, and keeps working beside the new formats (series keys, A3 records), through side-table
compaction that merges old and new series files."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import zlib

import pyarrow as pa
import pyarrow.parquet as pq

from metricsgw.storage.upkeep import compact
from metricsgw.storage.wal import records
from metricsgw.storage.store import Storage
from tests.storage.test_storage import NOW, batch, read_all


def _write_old_dir(root) -> None:
    os.makedirs(root / "series")
    old = batch(range(5), [NOW] * 5, [1.0] * 5)
    pq.write_table(pa.table({"sid": pa.array([s for s, _ in old.new_series], pa.int64()),
                             "labels": [json.dumps(dict(lb)) for _, lb in old.new_series]}),
                   root / "series" / "series-00000001.parquet")
    os.makedirs(root / "wal")
    payload = records.encode(batch(range(5, 8), [NOW + 1000] * 3, [2.0] * 3))  # an A2 record
    (root / "wal" / "00000003.wal").write_bytes(struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
    (root / "flushed.json").write_text(json.dumps({"wal_segment": 2}))


def test_previous_version_data_dir_opens_and_mixes_with_new_files(tmp_path, monkeypatch):
    root = tmp_path / "data"
    _write_old_dir(root)
    st = Storage(str(root))
    st.open()
    try:
        assert sorted(i for i, _, _ in read_all(st)) == ["5", "6", "7"]  # series 0-4 have no samples yet
        assert len(st.catalog) == 8
        asyncio.run(st.append(batch(range(8), [NOW + 2000] * 8, [3.0] * 8, new=False)))
        st.flush()
        monkeypatch.setattr(compact, "MAX_SIDE_FILES", 2)  # merge the old JSON file with the new key file
        compact.compact_side_tables(st)
        st.table.collect()  # the merged files are retired, deleted once no read holds them
        assert len(os.listdir(root / "table" / "series" / "writer=gw0")) == 1
    finally:
        st.close()
    st = Storage(str(root))
    st.open()
    try:
        assert len(st.catalog) == 8
        got = read_all(st)
        assert sorted((i, dt) for i, dt, _ in got) == sorted(
            [(str(i), 2000) for i in range(8)] + [(str(i), 1000) for i in range(5, 8)])
        assert {st.catalog.labels(sid) for sid, _ in batch(range(8), [0] * 8, [0] * 8).new_series} == \
            {lb for _, lb in batch(range(8), [0] * 8, [0] * 8).new_series}
    finally:
        st.close(flush=False)
