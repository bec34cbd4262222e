"""Several writer processes on one table (storage/files/table.py, docs/cluster.md): concurrent commits, kill -9
of one mid-flush, a follower reading consistent snapshots while writers commit and compact, plain Delta
readers, and one live process per writer id."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from metricsgw.storage import crashpoints
from metricsgw.storage.store import Storage
from testkit.procs import start_metricsgw
from tests.e2e.acked import AckedLoad, assert_exactly_once

FLAGS = ["--storage.flush-interval=1s", "--storage.partition-duration=10s", "--storage.vacuum-delay=0s"]
KINDS = ("samples", "series", "spans")


def gateway(tmp_path: Path, shared: Path, writer: str, port: int | None = None, env=None, extra=()):
    return start_metricsgw(tmp_path / writer, port=port, env=env,
                           extra=[f"--storage.path={shared}", f"--storage.writer-id={writer}", *FLAGS, *extra])


def wait_for(cond, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def data_files(shared: Path) -> set[str]:
    return {str(p) for p in (shared / "table").rglob("*.parquet*") if "_delta_log" not in p.parts}


def listed_files(shared: Path) -> set[str]:
    return {u for k in KINDS for u in DeltaTable(str(shared / "table" / k)).file_uris()}


def test_three_writers_commit_concurrently_and_kill_9_mid_flush_loses_nothing(tmp_path):
    shared = tmp_path / "shared"
    now_ms = int(time.time()) * 1000
    # gw1 kills itself at its 3rd flush after writing its files, before committing them; gw2 at its 2nd,
    # after the commit (which carries the WAL cut), before deleting the WAL segments it covers.
    crash = {1: {crashpoints.ENV: "flush.files:3"}, 2: {crashpoints.ENV: "flush.marker:2"}}
    # Armed ones run as one process: the crash point kills the process that writes (under a front, the front
    # would restart its shard at once; tests/e2e/test_processes.py covers that).
    gws = [gateway(tmp_path, shared, f"gw{i}", env=crash.get(i),
                   extra=["--server.single-process"] if i in crash else ()) for i in range(3)]
    loads = []
    try:
        for i, gw in enumerate(gws):
            gw.wait_ready()
            loads.append(AckedLoad(gw.base_url, now_ms - 1800_000, writers=2, series=30, first_series=100 * i).start())
        for i in crash:
            gws[i].proc.wait(timeout=120)
            killed_at = len(loads[i].acked)
            gws[i] = gateway(tmp_path, shared, f"gw{i}", port=int(gws[i].base_url.rsplit(":", 1)[1]))
            gws[i].wait_ready()
            loads[i].wait(lambda i=i: len(loads[i].acked) > killed_at + 30 * 200, f"gw{i} acknowledging again")
        for load in loads:
            load.wait(lambda load=load: len(load.acked) > 30 * 400, "every gateway acknowledging")
    finally:
        for load in loads:
            load.stop()
        for gw in gws:
            gw.stop()
    # Only the killed ones refused anything: while down (conn) and replaying their WAL (503).
    assert [set(load.statuses) - {204} <= ({"conn", 503} if i in crash else set()) for i, load in enumerate(loads)] \
        == [True] * 3, [dict(x.statuses) for x in loads]
    acked = sum(len(load.acked) for load in loads)
    samples = DeltaTable(str(shared / "table" / "samples"))
    rows, distinct = duckdb.execute("SELECT count(*), count(DISTINCT (sid, t)) FROM read_parquet($f)",
                                    {"f": samples.file_uris()}).fetchone()
    # At least the acknowledged ones: a request gw1 logged but died before answering may be there too.
    assert rows == distinct >= acked, "every sample in the table once"
    assert {samples.transaction_version(f"gw{i}") is not None for i in range(3)} == {True}
    assert data_files(shared) == listed_files(shared), "no stray or removed file left (vacuum delay 0)"
    reader = gateway(tmp_path, shared, "query0")  # a fresh process that follows every writer's commits
    try:
        reader.wait_ready()
        for load in loads:
            assert assert_exactly_once(reader.base_url, load) == len(load.acked)
    finally:
        reader.stop()


def _consistent(snap) -> tuple[int, int]:
    files = [f.path for f in snap.samples]
    if not files:
        return 0, 0
    return duckdb.execute("SELECT count(*), count(DISTINCT (sid, t)) FROM read_parquet($f)", {"f": files}).fetchone()


@pytest.mark.timeout(900)  # progress is counted in commits, not seconds: a busy machine only makes it slower
def test_a_follower_reads_consistent_snapshots_while_writers_commit_and_compact(tmp_path):
    shared = tmp_path / "shared"
    now_ms = int(time.time()) * 1000
    # Removed files stay 10 min for readers in other processes (this test's follower) before their writer deletes
    # them: far longer than one of its reads takes, however busy the machine.
    gws = [gateway(tmp_path, shared, f"gw{i}", extra=["--storage.vacuum-delay=10m"]) for i in range(2)]
    loads = []
    follower = None
    try:
        for i, gw in enumerate(gws):
            gw.wait_ready()
            # Paced at the clock once it has caught up: the writers go on committing (and compacting the
            # 10 s partitions their flushes fill) for as long as the follower needs to see it.
            loads.append(AckedLoad(gw.base_url, now_ms - 1800_000, writers=2, series=30, step_ms=2000,
                                   first_series=100 * i, max_ahead_ms=0).start())
        follower = Storage(str(shared), writer_id="follower0")
        follower.open()
        seen, removes_seen, versions = 0, 0, set()
        deadline = time.monotonic() + 840
        while removes_seen < 3 or len(versions) < 10:
            assert time.monotonic() < deadline, f"writers did not commit and compact: {removes_seen}, {len(versions)}"
            assert [set(load.statuses) <= {204} for load in loads] == [True, True], [dict(x.statuses) for x in loads]
            before = follower.table.current
            follower.follow()
            with follower.table.pin() as snap:
                rows, distinct = _consistent(snap)  # reads every file listed: none deleted under the pin
            assert rows == distinct, f"version {snap.table_version}: a sample listed twice (compaction inputs and output?)"
            assert distinct >= seen, "a snapshot lost samples an older one had"
            seen = distinct
            versions.add(snap.table_version)
            removes_seen += bool({f.path for f in before.samples} - {f.path for f in snap.samples})
            time.sleep(0.2)
        assert len(follower.catalog) == 60, "every writer's series joined the follower's catalog"
    finally:
        if follower is not None:
            follower.close(flush=False)
        for load in loads:
            load.stop()
        for gw in gws:
            gw.stop()


def test_a_second_live_process_with_the_same_writer_id_is_refused(tmp_path):
    shared = tmp_path / "shared"
    first = gateway(tmp_path, shared, "gw0")
    try:
        first.wait_ready()
        second = start_metricsgw(tmp_path / "again", extra=[f"--storage.path={shared}", "--storage.writer-id=gw0"])
        assert second.proc.wait(timeout=60) != 0
        # whichever of its processes claims first is refused: the shard (gw0) or the query process (gw0-q0)
        assert re.search(r"writer id 'gw0(-q0)?' is in use by another live process", second.log_tail(100_000))
        assert first.proc.poll() is None
    finally:
        first.stop()
