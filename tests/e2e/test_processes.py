"""`metricsgw serve` with default flags as a front and its children (metricsgw/procs/): a real Prometheus and
an acknowledging load write through the front, a shard is killed with -9 and restarted, a client that hangs up
stops its query in the child, /metrics and /-/ready speak for the whole gateway, SIGHUP and /-/reload reach
every child, SIGTERM stops them in order."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import psutil

from bench.procs import gateway_children as children
from bench.procs import http_get, start_metricsgw
from tests.e2e.acked import AckedLoad, assert_exactly_once
from tests.e2e.client import api, remote_write
from tests.e2e.compare import diff
from tests.e2e.procs_helpers import unix_api, unix_get, wait_for
from tests.e2e.prometheus import Exporter, start_scraping_prometheus
from tests.guard.helpers import QueryHold, metric, send_and_hang_up
from metricsgw.remote.codec import encode_v1, encode_v2


def _base_ms() -> int:
    return (int(time.time()) - 3600) * 1000  # an hour back: inside retention, never in the future


def test_kill_9_of_a_shard_loses_nothing_acknowledged_and_prometheus_catches_up(tmp_path):
    gw = start_metricsgw(tmp_path / "gw")
    exporter = Exporter(nodes=1)
    prom = None
    load = AckedLoad(gw.base_url, _base_ms(), writers=2, series=40)
    try:
        gw.wait_ready()
        assert set(children(gw.pid)) == {"shard-0"}
        prom = start_scraping_prometheus(tmp_path / "prom", exporter.address, gw.write_url)
        prom.wait_ready()
        load.start()
        load.wait(lambda: len(load.acked) >= 40 * 20, "acknowledged writes before the kill")
        victim = children(gw.pid)["shard-0"]
        victim.send_signal(signal.SIGKILL)
        restarted = wait_for(lambda: (c := children(gw.pid).get("shard-0")) and c.pid != victim.pid and c,
                             "the front restarting shard-0")
        gw.wait_ready()
        acked_before = len(load.acked)
        load.wait(lambda: len(load.acked) >= acked_before + 40 * 20, "acknowledged writes after the restart")
        load.stop()
        assert restarted.is_running()
        assert assert_exactly_once(gw.base_url, load) >= 40 * 40
        assert metric(gw.base_url, "metricsgw_front_child_restarts_total", process="front", child="shard-0") == 1
        assert f"shard-0 (pid {victim.pid}) killed by SIGKILL; restarting it in" in gw.log_tail(100_000)
        assert "conn" not in load.statuses  # the front stayed up: a write during the restart got a status
        # Prometheus resent what the dead shard could not take: metricsgw ends with what Prometheus has.
        exporter.close()
        q = {"query": "count_over_time(up[10m])", "time": time.time() + 1}
        wait_for(lambda: not diff(api(gw.base_url, "/api/v1/query", q)[1]["data"],
                                  api(prom.base_url, "/api/v1/query", q)[1]["data"]),
                 "metricsgw holding every scrape Prometheus holds", timeout_s=90)
    finally:
        load.stop()
        exporter.close()
        if prom is not None:
            prom.stop()
        gw.stop()


def test_a_client_that_hangs_up_cancels_its_query_in_the_child(tmp_path):
    hold = QueryHold(tmp_path / "hold")
    gw = start_metricsgw(tmp_path / "gw", env=hold.env)
    try:
        gw.wait_ready()
        hold.engage()
        send_and_hang_up(gw.base_url, "/api/v1/query", {"query": "vector(1)" + QueryHold.HELD},
                         wait=lambda: hold.wait(lambda: hold.reached() == 1, "the query held in the child"))
        hold.wait(lambda: hold.endings() == ["canceled"], "the child cancelling the query")
        hold.release()
        status, body = api(gw.base_url, "/api/v1/query", {"query": "vector(1)" + QueryHold.HELD})
        assert status == 200, body  # the child goes on serving
    finally:
        hold.release()
        gw.stop()


def test_ready_names_the_child_that_is_not_and_metrics_cover_every_process(tmp_path):
    gw = start_metricsgw(tmp_path / "gw")
    try:
        gw.wait_ready()
        status, _, _ = remote_write(gw.base_url, encode_v1([([("__name__", "m"), ("i", str(i))],
                                                              [(_base_ms(), 1.0)]) for i in range(30)]))
        assert status == 204
        assert metric(gw.base_url, "metricsgw_ingested_samples_total", process="shard-0") == 30
        # The query reaches the child byte for byte (a proxy that re-encodes the URL turned "0\nor" into "0or").
        for method in ("GET", "POST"):
            status, body = api(gw.base_url, "/api/v1/query", {"query": "vector(1) > 0\nor vector(2) + 1", "time": 10},
                               method=method)
            assert status == 200 and body["data"]["result"][0]["value"] == [10, "1"], body
        assert metric(gw.base_url, "metricsgw_front_write_requests_total", process="front", code="204") == 1
        shard = children(gw.pid)["shard-0"]
        shard.suspend()  # alive but not answering: the front must not call it ready
        try:
            status, body = http_get(gw.base_url + "/-/ready", timeout=30)
            assert status == 503 and b"shard-0" in body, body
        finally:
            shard.resume()
        wait_for(lambda: http_get(gw.base_url + "/-/ready")[0] == 200, "ready again")
    finally:
        gw.stop()


def test_two_shards_hold_every_acknowledged_sample_once_between_them(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=["--ingest.shards=2"])
    load = AckedLoad(gw.base_url, _base_ms(), writers=2, series=60)
    try:
        wait_for(lambda: set(children(gw.pid)) == {"shard-0", "shard-1"}, "both shards")
        sockets = [str(tmp_path / "gw" / "data" / "run" / f"shard-{i}.sock") for i in range(2)]
        wait_for(lambda: all(os.path.exists(s) and unix_get(s, "/-/ready")[0] == 200 for s in sockets),
                 "both shards ready")
        load.start()
        load.wait(lambda: len(load.acked) >= 60 * 30, "acknowledged writes")
        load.stop()
        assert set(load.statuses) == {204}
        assert assert_exactly_once(sockets, load, ask=unix_api) >= 60 * 30
        per_shard = [int(unix_api(s, "/api/v1/query", {"query": "count(count_over_time(acked_test[2h]))",
                                                       "time": time.time()})[1]["data"]["result"][0]["value"][1])
                     for s in sockets]
        assert sum(per_shard) == 60 and min(per_shard) > 0, per_shard  # split by series, not copied
        assert http_get(gw.base_url + "/-/ready")[0] == 503  # no query process can read both (docs/cluster.md)
        # Remote-Write 2.0 is split too, and its written count is the sum of the shards' exact counts; a series
        # one shard refuses makes the answer 400 with that shard's reason, the rest stored.
        t_ms = _base_ms() + 3_000_000
        series = [([("__name__", "rw2_test"), ("s", str(s))], [(t_ms, 1.0), (t_ms + 1000, 2.0)]) for s in range(40)]
        status, text, headers = remote_write(gw.base_url, encode_v2(series), version=2)
        assert status == 204 and headers["X-Prometheus-Remote-Write-Samples-Written"] == "80", (status, text)
        bad = series[:10] + [([("__name__", "rw2_test"), ("bad-name", "x")], [(t_ms, 1.0)])]
        status, text, headers = remote_write(gw.base_url, encode_v2(bad), version=2)
        assert status == 400 and "shard-" in text and "bad-name" in text, text
        assert headers["X-Prometheus-Remote-Write-Samples-Written"] == "20", headers
        per_shard = [int(unix_api(s, "/api/v1/query", {"query": "count(count_over_time(rw2_test[2h]))",
                                                       "time": t_ms / 1000 + 60})[1]["data"]["result"][0]["value"][1])
                     for s in sockets]
        assert sum(per_shard) == 40 and min(per_shard) > 0, per_shard
    finally:
        load.stop()
        gw.stop()


def test_reload_and_sighup_reach_the_children_and_sigterm_stops_them_in_order(tmp_path):
    rules = tmp_path / "drop.yml"
    rules.write_text("[]\n")
    gw = start_metricsgw(tmp_path / "gw", extra=[f"--rules.file={rules}", "--web.enable-lifecycle"])
    try:
        gw.wait_ready()

        def write(name: str, t_ms: int) -> None:
            assert remote_write(gw.base_url, encode_v1([([("__name__", name)], [(t_ms, 1.0)])]))[0] == 204

        def dropped() -> float:
            return metric(gw.base_url, "metricsgw_discarded_samples_total", process="shard-0", reason="relabel_drop")

        write("dropme", _base_ms())
        assert dropped() == 0
        rules.write_text("- source_labels: [__name__]\n  regex: dropme\n  action: drop\n")
        with urllib.request.urlopen(urllib.request.Request(gw.base_url + "/-/reload", method="POST")) as r:
            assert r.status == 200
        write("dropme", _base_ms() + 1000)
        assert dropped() == 1
        rules.write_text("[]\n")
        os.kill(gw.pid, signal.SIGHUP)
        later = iter(range(2000, 10**9, 1000))
        wait_for(lambda: write("dropme", _base_ms() + next(later)) or _kept(gw.base_url),
                 "SIGHUP reloading the child's rules: dropme kept again")
        kids = list(children(gw.pid).values())
    finally:
        code = gw.stop()
    assert code == 0, gw.log_tail()
    assert all(not k.is_running() for k in kids)
    log = gw.log_tail(20000)
    assert "proc=shard-0" in log and "stopped" in log
    # The shard flushed on the way out: its samples are in the table's Parquet files.
    assert any((tmp_path / "gw" / "data" / "table" / "samples").rglob("*.parquet"))


def _kept(base_url: str) -> bool:
    """dropme holds a sample written after the reload (the first was written before any drop rule)."""
    status, body = api(base_url, "/api/v1/query", {"query": "count_over_time(dropme[2h])", "time": time.time()})
    return status == 200 and bool(body["data"]["result"]) and float(body["data"]["result"][0]["value"][1]) >= 2


def test_children_die_with_the_front_even_when_it_is_killed(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=["--ingest.shards=2"])
    kids = []
    try:
        kids = wait_for(lambda: len(c := children(gw.pid)) == 2 and list(c.values()), "both shards")
        sockets = [str(tmp_path / "gw" / "data" / "run" / f"shard-{i}.sock") for i in range(2)]
        wait_for(lambda: all(unix_get(s, "/-/ready")[0] == 200 for s in sockets), "both shards serving")
        os.kill(gw.pid, signal.SIGKILL)  # only the front: no chance to stop its children itself
        gw.proc.wait()
        gone, alive = psutil.wait_procs(kids, timeout=30)
        for orphan in alive:  # do not leave them running when this fails
            orphan.kill()
        assert not alive, f"children outlived the front: {alive}"
    finally:
        gw.kill()
