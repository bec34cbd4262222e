"""The one-time migration of a data directory the previous version wrote (fixtures/old_data_dir, written by
commit be114ac's storage: see fixtures/make_old_data_dir.py) into the table: every sample and series is
there once, a kill -9 at any step of the migration loses nothing, and plain Delta readers read the result."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher
from metricsgw.storage import crashpoints
from metricsgw.storage.store import Storage

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "old_data_dir"  # shared by tests/storage/
FOREVER_MS = 100 * 365 * 86400_000  # the fixture's samples are from 2026: retention must not drop them
REPO = Path(__file__).resolve().parents[3]


def expected() -> collections.Counter:
    with open(f"{FIXTURE}.expected.json") as fh:
        return collections.Counter((frozenset(lb.items()), t, v) for lb, t, v in json.load(fh))


def old_copy(tmp_path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(FIXTURE, root)
    return root


def opened(root) -> Storage:
    st = Storage(str(root), retention_ms=FOREVER_MS)
    st.open()
    return st


def stored(st: Storage) -> collections.Counter:
    ss = st.select_series([Matcher("__name__", "=~", ".+")], None, None, QueryContext())
    b = st.read_samples(ss.ids, 0, 2**62, QueryContext())
    return collections.Counter((frozenset(st.catalog.labels(int(s))), int(t), float(v))
                               for s, t, v in zip(b.sid, b.t, b.v))


def old_names_left(root: Path) -> list[str]:
    left = [n for n in ("samples", "series", "spans", "flushed.json", "metadata.json", "catalog.npz.zst")
            if (root / n).exists()]
    return left + [p.name for p in (root / "wal").glob("*.wal")]


def test_migration_keeps_every_sample_series_and_metadata_once(tmp_path):
    root = old_copy(tmp_path)
    want = expected()
    assert len(want) == 10 * 4 + 20 * 4 + 30 * 4 + 15 * 3
    st = opened(root)
    try:
        assert stored(st) == want
        assert len(st.catalog) == 40
        assert st.metadata("old_metric")["old_metric"][0]["help"] == "a metric of the old layout"
        assert old_names_left(root) == []
        assert (root / "wal" / "gw0" / "00000004.wal").exists(), "the unflushed segment moved with its writer"
        assert st.table.committed_wal_segment() == 3, "flushed.json's segment is the writer's app transaction"
        assert st.files.head_samples() == 15 * 3, "only the segment after flushed.json's is replayed"
        st.flush()
    finally:
        st.close()
    st = opened(root)  # the flushed WAL is gone: everything from the table now
    try:
        assert st.files.head_samples() == 0 and stored(st) == want
    finally:
        st.close(flush=False)


@pytest.mark.parametrize("point", crashpoints.MIGRATION_POINTS)
def test_kill_9_at_a_step_of_the_migration_loses_nothing(tmp_path, point):
    root = old_copy(tmp_path)
    script = f"from metricsgw.storage.store import Storage; Storage({str(root)!r}, retention_ms={FOREVER_MS}).open()"
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=120,
                          env={**os.environ, crashpoints.ENV: f"{point}:1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert old_names_left(root), "the kill came before the migration finished"
    st = opened(root)
    try:
        assert stored(st) == expected()
        assert old_names_left(root) == []
        st.flush()
    finally:
        st.close()
    st = opened(root)
    try:
        assert stored(st) == expected()
    finally:
        st.close(flush=False)
    assert table_rows(root) == sum(expected().values()), "no file committed twice (reads would hide it)"


def table_rows(root: Path) -> int:
    return DeltaTable(str(root / "table" / "samples")).to_pyarrow_table().num_rows


def test_plain_delta_and_duckdb_readers_read_the_samples_table(tmp_path):
    root = old_copy(tmp_path)
    st = opened(root)
    st.flush()
    st.close()
    want = sorted((t, v) for _, t, v in expected().elements())
    samples = DeltaTable(str(root / "table" / "samples"))
    tb = samples.to_pyarrow_table()
    assert sorted(zip(tb.column("t").to_pylist(), tb.column("v").to_pylist())) == want
    assert set(tb.column("hour").to_pylist()) == {"1779998400000", "1780002000000"}
    assert pc.min(tb.column("t")).as_py() == want[0][0]
    rows = duckdb.execute("SELECT t, v FROM read_parquet($files) ORDER BY t, v", {"files": samples.file_uris()}).fetchall()
    assert rows == want
    series = DeltaTable(str(root / "table" / "series")).to_pyarrow_table()
    assert series.num_rows == 40 and set(series.column("writer").to_pylist()) == {"gw0"}
