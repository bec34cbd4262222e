"""A disk filled to ENOSPC under unthrottled remote-write load, for real (a small tmpfs).

While the WAL cannot be written every write is answered 503 (Prometheus retries) and /-/ready
says why while /-/healthy stays 200; once space comes back writes succeed again with no
restart; a kill -9 while the disk is full and a restart on the still-full disk come back
with every acknowledged sample, once."""

from __future__ import annotations

import os
import time

from testkit.procs import http_get, start_metricsgw
from tests.e2e.acked import AckedLoad, assert_exactly_once
from tests.guard.helpers import own_metrics
from tests.storage.tmpfs import fill, small_tmpfs


def _metric(base_url: str, name: str, over_processes=sum) -> float:
    values = [v for (n, _), v in own_metrics(base_url).items() if n == name]
    assert values, f"{name} not in /metrics"
    return over_processes(values)  # one sample per process of the gateway


def _ready_body(server) -> bytes:
    try:
        return http_get(server.base_url + "/-/ready")[1]
    except OSError:  # not listening yet
        return b""


def _wait_gone(pgid: int, timeout_s: float = 60.0) -> None:
    """Until no process of the killed gateway's session is left (its children die after it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "the killed gateway's processes are still there"
        time.sleep(0.05)


def test_disk_full_under_load_then_freed(tmp_path):
    with small_tmpfs(tmp_path / "mnt", "24m") as disk:
        server = start_metricsgw(disk, extra=["--storage.flush-interval=1s"])
        port = int(server.base_url.rsplit(":", 1)[1])
        load = None
        try:
            server.wait_ready()
            load = AckedLoad(server.base_url, (int(time.time()) - 1800) * 1000).start()
            load.wait(lambda: len(load.acked) > 200 * load.series, "writes to be acknowledged")
            filler = disk / "filler"
            fill(filler)
            load.wait(lambda: load.statuses[503] >= 20, "writes to be refused with 503 on the full disk")
            status, body = http_get(server.base_url + "/-/ready")
            assert status == 503 and b"No space left" in body, body
            assert http_get(server.base_url + "/-/healthy")[0] == 200
            # the gateway is writable when every process is (a query process writes no WAL, and stays at 1)
            assert _metric(server.base_url, "metricsgw_storage_writable", min) == 0
            assert _metric(server.base_url, "metricsgw_wal_write_failures_total") >= 1

            filler.unlink()  # space comes back: no restart, writes succeed again
            freed = time.monotonic()
            load.wait(lambda: load.last_ok > freed + 1, "writes to succeed again after space came back")
            load.wait(lambda: http_get(server.base_url + "/-/ready")[0] == 200, "/-/ready to be 200 again")
            acked_after = len(load.acked)
            load.wait(lambda: len(load.acked) > acked_after + 200 * load.series, "more writes after recovery")

            fill(filler)  # full again: flushes fail too, and leave nothing half-written behind
            failures = _metric(server.base_url, "metricsgw_flush_failures_total")
            load.wait(lambda: load.statuses[503] >= 40, "writes refused on the full disk again")
            load.wait(lambda: _metric(server.base_url, "metricsgw_flush_failures_total") > failures,
                      "a flush to fail on the full disk")
            load.wait(lambda: not list(disk.rglob("*.tmp")), "no half-written file left by the failed flushes")
            server.kill()  # and killed while full
            load.stop()
            # The crash itself frees space: files its processes had deleted but held open, a flush's or a disk probe's
            # .tmp file that the restart removes first. Fill that back (once every process of the gateway is gone)
            # so the restart finds the disk as full as the crash left it for writes.
            _wait_gone(server.proc.pid)
            for leftover in disk.rglob("*.tmp"):
                leftover.unlink()
            fill(filler)

            server = start_metricsgw(disk, port=port, extra=["--storage.flush-interval=1s"])
            # The restart replays on the full disk, but its own clean-up may free room (WAL segments a flush had
            # covered before the kill, its log file reopened). Once it is open, fill that back too: then writes are
            # refused again and /-/ready says why, whatever the clean-up found.
            load.wait(lambda: "storage open:" in server.log_tail(100_000) or server.proc.poll() is not None,
                      "the restart to open its storage")
            assert server.proc.poll() is None, server.log_tail()
            fill(filler)
            load.start()
            load.wait(lambda: b"cannot be written" in _ready_body(server), "the restart to report the full disk")
            filler.unlink()
            server.wait_ready(timeout_s=60)
            load.stop()
            n = assert_exactly_once(server.base_url, load)
            assert n > 400 * load.series and load.statuses[503] >= 40
        finally:
            if load is not None:
                load.stop()
            server.stop()
