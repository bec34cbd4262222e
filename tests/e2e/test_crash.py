"""kill -9 during load loses no acknowledged sample, and replays none twice."""

from __future__ import annotations

import random
import subprocess
import threading
import time

import pytest

from metricsgw.remote.codec import encode_v1
from metricsgw.storage import crashpoints
from testkit.procs import free_port, start_metricsgw
from tests.e2e.acked import AckedLoad, assert_exactly_once
from tests.e2e.client import api, remote_write

SERIES = 50


def _request(base_ms: int, i: int) -> tuple[bytes, list[tuple[str, int]]]:
    """Request i: one sample per series at a distinct timestamp; value encodes (series, i)."""
    t = base_ms + i * 1000
    series = [((("__name__", "crash_test"), ("s", str(s))), [(t, float(s * 100000 + i))]) for s in range(SERIES)]
    return encode_v1(series), [(str(s), t) for s in range(SERIES)]


def _load(base_url: str, base_ms: int, acked: list, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set() and i < 100_000:
        body, keys = _request(base_ms, i)
        try:
            status, _, _ = remote_write(base_url, body, timeout=5)
        except OSError:
            return  # the server died mid-request: this one was never acknowledged
        if status == 204:
            acked.extend(keys)
        i += 1


@pytest.mark.parametrize("fsync", ["true", "false"])
def test_kill_9_during_load_loses_no_acknowledged_sample(tmp_path, fsync):
    """Also with --storage.wal-fsync=false: a record written to the operating system outlives the process."""
    # 10 h back: the second thread starts 6.9 h later, and all stays in the past (samples more than
    # --ingest.creation-grace-period ahead of the clock are refused).
    base_ms = (int(time.time()) - 36_000) * 1000
    # Flush often so the kill lands around flushes as well as WAL appends.
    server = start_metricsgw(tmp_path, extra=["--storage.flush-interval=1s", f"--storage.wal-fsync={fsync}"])
    server.wait_ready()
    acked: list[tuple[str, int]] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_load, args=(server.base_url, base_ms + k * 100_000_000 // 4, acked, stop))
               for k in range(2)]
    for th in threads:
        th.start()
    time.sleep(4.0)
    server.kill()  # SIGKILL to every process of the gateway: no clean shutdown, no final flush
    stop.set()
    for th in threads:
        th.join()
    assert len(acked) > 10 * SERIES, "the load did not get going before the kill"

    restarted = start_metricsgw(tmp_path, port=int(server.base_url.rsplit(":", 1)[1]))
    try:
        restarted.wait_ready()
        end_s = (max(t for _, t in acked) + 1000) / 1000
        status, body = api(restarted.base_url, "/api/v1/query",
                           {"query": f"crash_test[{int(end_s - base_ms / 1000) + 60}s]", "time": end_s})
        assert status == 200, body
        stored: dict[tuple[str, int], int] = {}
        for series in body["data"]["result"]:
            s = series["metric"]["s"]
            for ts, _ in series["values"]:
                key = (s, round(float(ts) * 1000))
                stored[key] = stored.get(key, 0) + 1
        missing = [k for k in acked if k not in stored]
        assert not missing, f"{len(missing)} acknowledged samples lost, e.g. {missing[:5]}"
        dupes = [k for k, n in stored.items() if n > 1]
        assert not dupes, f"samples stored twice: {dupes[:5]}"
    finally:
        restarted.stop()


# -- kill -9 at chosen steps of flush, compaction and retention, over several restarts ----------

CRASH_SEED = 20261201
# Short flushes and 10 s partitions so flushes, compactions and retention passes all happen within seconds.
# One process: the crash points kill the process that owns the storage, and the test restarts it itself
# (under a front, the front would restart a shard that killed itself: tests/e2e/test_processes.py).
CRASH_FLAGS = ["--storage.flush-interval=1s", "--storage.partition-duration=10s", "--storage.retention.time=2h",
               "--server.single-process"]


def test_kill_9_at_random_steps_of_flush_compaction_and_retention(tmp_path, monkeypatch):
    """Each round arms one crash point (crashpoints.py; every point once, in an order and at an
    arrival drawn from a seeded RNG), sends load until the server kills itself there, and
    restarts on the same data. Samples about to leave retention
    are sent too, so retention deletes partitions and compaction merges closed ones."""
    rng = random.Random(CRASH_SEED)
    now_ms = int(time.time()) * 1000
    port = free_port()
    load = AckedLoad(f"http://127.0.0.1:{port}", now_ms - 1800_000, writers=2)
    # Samples just inside retention (older ones are refused): within ~25 s their partition falls
    # out of it, and the retention pass deletes its files. A 1 ms step keeps them near that edge.
    old = AckedLoad(load.base_url, now_ms - 2 * 3600_000 + 12_000, writers=1, series=20, step_ms=1)
    hits = []
    points = rng.sample(crashpoints.POINTS, len(crashpoints.POINTS))
    for point in points:
        nth = rng.randint(1, 3)
        monkeypatch.setenv(crashpoints.ENV, f"{point}:{nth}")
        server = start_metricsgw(tmp_path, port=port, extra=CRASH_FLAGS)
        try:
            server.wait_ready()
            load.start()
            old.start()
            try:
                server.proc.wait(timeout=45)  # the server kills itself at the armed point
                hits.append(point)
            except subprocess.TimeoutExpired:
                server.kill()  # the point was not reached in time: a plain kill -9 then
        finally:
            load.stop()
            old.stop()
            server.stop()
    monkeypatch.delenv(crashpoints.ENV)
    assert hits == points, f"crash points armed {points}, reached {hits}"
    server = start_metricsgw(tmp_path, port=port, extra=CRASH_FLAGS)
    try:
        server.wait_ready()
        assert assert_exactly_once(server.base_url, load) > 0
    finally:
        server.stop()
