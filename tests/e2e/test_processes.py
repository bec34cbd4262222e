"""`metricsgw serve` with default flags as a front and its children (metricsgw/procs/): on this machine's cores
that is ingest shards and a query process (2 + 1 on 2 cores; tests name the counts they rely on). A real
Prometheus and an acknowledging load write through the front, a shard is killed with -9 and restarted (answers
meanwhile warn, none is wrong), every acknowledged sample is read once through the front whether flushed or
in a shard's head, ?scope=head on the front joins the shards, a query held in the querier does not hold up
writes, a client that hangs up stops its query in the querier, /metrics and /-/ready speak for the whole
gateway, SIGHUP and /-/reload reach every child, SIGTERM stops them in order."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import socket
import time
import urllib.request

import psutil

from metricsgw.remote.codec import encode_v1, encode_v2
from metricsgw.cluster.head_protocol import TABLE_VERSION_HEADER
from testkit.procs import gateway_children as children
from testkit.procs import http_get, start_metricsgw
from tests.e2e.acked import AckedLoad, assert_exactly_once
from tests.e2e.client import api, remote_write
from tests.e2e.compare import diff
from tests.e2e.procs_helpers import unix_get, unix_post, wait_for
from tests.e2e.prometheus import Exporter, start_scraping_prometheus
from tests.guard.helpers import QueryHold, metric, own_metrics, send_and_hang_up
from tests.remote.read_client import HEADERS, build_request, decode_samples, post


TWO_SHARDS = ["--ingest.shards=2", "--query.processes=1"]  # the 2-core default, on a machine of any size
CHILDREN = {"shard-0", "shard-1", "querier-0"}
PLAIN_NAMES = {"shard-0": "ingest shard 0", "shard-1": "ingest shard 1", "querier-0": "query process 0"}


def _base_ms() -> int:
    return (int(time.time()) - 3600) * 1000  # an hour back: inside retention, never in the future


def _sockets(gw_dir) -> list[str]:
    return [str(gw_dir / "data" / "run" / "gw0" / f"shard-{i}.sock") for i in range(2)]


def _query(base_url: str, query: str, **params) -> tuple[int, dict]:
    return api(base_url, "/api/v1/query", {"query": query, "time": time.time(), **params}, timeout=120)


def test_kill_9_of_a_shard_loses_nothing_acknowledged_and_prometheus_catches_up(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=TWO_SHARDS)
    exporter = Exporter(nodes=1)
    prom = None
    load = AckedLoad(gw.base_url, _base_ms(), writers=2, series=40)
    try:
        gw.wait_ready()
        assert set(children(gw.pid)) == CHILDREN
        prom = start_scraping_prometheus(tmp_path / "prom", exporter.address, gw.write_url)
        prom.wait_ready()
        load.start()
        load.wait(lambda: len(load.acked) >= 40 * 20, "acknowledged writes before the kill")
        victim = children(gw.pid)["shard-0"]
        # Stopped first, so the answers "meanwhile" are certain to meet it down (a restart can be quicker than
        # any query); kill -9 works on a stopped process as on a running one.
        victim.suspend()
        # A shard is part of every query: one that does not answer takes the query's time, and the answer is the
        # query's own timeout (never a 200 lacking the shard's samples).
        status, body = _query(gw.base_url, "count(count_over_time(acked_test[2h]))", timeout="2s")
        assert (status, body["errorType"]) == (503, "timeout") and "--query.timeout" in body["error"], body
        victim.send_signal(signal.SIGKILL)
        restarted = wait_for(lambda: (c := children(gw.pid).get("shard-0")) and c.pid != victim.pid and c,
                             "the front restarting shard-0")
        gw.wait_ready()
        acked_before = len(load.acked)
        load.wait(lambda: len(load.acked) >= acked_before + 40 * 20, "acknowledged writes after the restart")
        load.stop()
        assert restarted.is_running()
        wait_for(lambda: _query(gw.base_url, "count(acked_test)")[0] == 200,
                 "answers again after the restart", timeout_s=120)
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


def test_a_query_held_in_the_querier_holds_up_no_write_and_one_whose_client_hangs_up_is_cancelled(tmp_path):
    hold = QueryHold(tmp_path / "hold")
    gw = start_metricsgw(tmp_path / "gw", env=hold.env, extra=TWO_SHARDS)
    acked = []

    def writes_while_held() -> None:
        hold.wait(lambda: hold.reached() == 1, "the query held in the querier")
        for i in range(20):  # every shard takes its part while the querier evaluates (holds) the query
            status, text, _ = remote_write(gw.base_url, encode_v1(
                [([("__name__", "during_hold"), ("s", str(s))], [(_base_ms() + i * 1000, 1.0)]) for s in range(10)]))
            assert status == 204, text
            acked.append(i)
        assert hold.reached() == 1 and hold.endings() == []  # still held: the writes did not wait for it

    try:
        gw.wait_ready()
        hold.engage()
        send_and_hang_up(gw.base_url, "/api/v1/query", {"query": "vector(1)" + QueryHold.HELD},
                         wait=writes_while_held)
        hold.wait(lambda: hold.endings() == ["canceled"], "the querier cancelling the query")
        assert len(acked) == 20
        for shard in ("shard-0", "shard-1"):  # both shards took writes (10 series, split by hash)
            assert metric(gw.base_url, "metricsgw_ingested_samples_total", process=shard) > 0
        hold.release()
        status, body = api(gw.base_url, "/api/v1/query", {"query": "vector(1)" + QueryHold.HELD})
        assert status == 200, body  # the querier goes on serving
        status, body = _query(gw.base_url, "count_over_time(during_hold[2h])")
        assert status == 200 and sorted(float(r["value"][1]) for r in body["data"]["result"]) == [20.0] * 10, body
        answered = {labels["child"] for labels in _front_proxied(gw.base_url)}
        assert answered == {"querier-0"}, answered  # every query went to the querier, none to a shard
    finally:
        hold.release()
        gw.stop()


def test_ready_names_the_child_that_is_not_and_metrics_cover_every_process(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=TWO_SHARDS)
    try:
        gw.wait_ready()
        status, _, _ = remote_write(gw.base_url, encode_v1([([("__name__", "m"), ("i", str(i))],
                                                              [(_base_ms(), 1.0)]) for i in range(30)]))
        assert status == 204
        per_shard = [metric(gw.base_url, "metricsgw_ingested_samples_total", process=f"shard-{i}") for i in (0, 1)]
        assert sum(per_shard) == 30 and min(per_shard) > 0, per_shard
        assert metric(gw.base_url, "metricsgw_ingested_samples_total", process="querier-0") == 0
        # The query reaches the child byte for byte (a proxy that re-encodes the URL turned "0\nor" into "0or").
        for method in ("GET", "POST"):
            status, body = api(gw.base_url, "/api/v1/query", {"query": "vector(1) > 0\nor vector(2) + 1", "time": 10},
                               method=method)
            assert status == 200 and body["data"]["result"][0]["value"] == [10, "1"], body
        assert metric(gw.base_url, "metricsgw_front_write_requests_total", process="front", code="204") == 1
        # query processes below ingest (--query.processes-niceness, 10 by default); shards as the front
        base = psutil.Process(gw.pid).nice()
        assert {n: p.nice() for n, p in children(gw.pid).items()} == {
            "shard-0": base, "shard-1": base, "querier-0": min(19, base + 10)}
        for name in ("shard-1", "querier-0"):
            child = children(gw.pid)[name]
            child.suspend()  # alive but not answering: the front must not call it ready
            try:
                status, body = http_get(gw.base_url + "/-/ready", timeout=30)
                assert status == 503 and PLAIN_NAMES[name].encode() in body, body
            finally:
                child.resume()
        wait_for(lambda: http_get(gw.base_url + "/-/ready")[0] == 200, "ready again")
    finally:
        gw.stop()


def test_two_gateways_on_one_storage_path_have_their_own_children(tmp_path):
    """Gateways sharing one --storage.path on one machine (the three-gateway setup, docs/cluster.md) each reach their own
    shards and queriers: sockets in run/<writer id>/. With one run/ for all, the second gateway's children
    bound the first's socket paths (new connections of the first front reached the other gateway's children),
    and stopping the second unlinked the first's sockets."""
    shared = tmp_path / "shared"
    gws = {}
    try:
        for w in ("gwa", "gwb"):  # one after the other: the second starts while the first serves
            gws[w] = start_metricsgw(tmp_path / w, extra=[f"--storage.path={shared}", f"--storage.writer-id={w}"])
            gws[w].wait_ready()
            for name in ("shard-0", "querier-0"):  # its own children bound their sockets (ready alone could be
                # answered by another gateway's children on the same path)
                wait_for(lambda: f"{name} listening on" in gws[w].log_tail(100_000), f"{w}'s {name} listening")
        dirs = {w: re.search(r"sockets in (\S+)", gw.log_tail(100_000)).group(1) for w, gw in gws.items()}
        assert dirs == {w: str(shared / "run" / w) for w in gws}
        gws.pop("gwb").stop()  # its children unlink their sockets: none of them is gwa's
        for name in ("shard-0", "querier-0"):
            assert unix_get(os.path.join(dirs["gwa"], f"{name}.sock"), "/-/ready")[0] == 200, name
        series = [([("__name__", "m"), ("i", str(i))], [(_base_ms(), 1.0)]) for i in range(30)]
        assert remote_write(gws["gwa"].base_url, encode_v1(series))[0] == 204
        assert metric(gws["gwa"].base_url, "metricsgw_ingested_samples_total") == 30
        status, body = _query(gws["gwa"].base_url, "count(last_over_time(m[2h]))")
        assert status == 200 and body["data"]["result"][0]["value"][1] == "30", body
    finally:
        for gw in gws.values():
            gw.stop()


def test_every_acknowledged_sample_once_through_the_front_flushed_or_in_the_shards_heads(tmp_path):
    gw_dir = tmp_path / "gw"
    gw = start_metricsgw(gw_dir, extra=TWO_SHARDS)
    load = AckedLoad(gw.base_url, _base_ms(), writers=2, series=60)
    try:
        gw.wait_ready()
        load.start()
        load.wait(lambda: len(load.acked) >= 60 * 20, "acknowledged writes (first run)")
        load.stop()
    finally:
        load.stop()
        assert gw.stop() == 0, gw.log_tail()  # each shard flushes its head into the table on the way out
    flushed = len(load.acked)
    writers = {p.name.removeprefix("part-").rsplit("-", 1)[0]
               for p in (gw_dir / "data" / "table" / "samples").rglob("*.parquet")}
    assert writers == {"gw0-s0", "gw0-s1"}  # the first run is in the table, from both shards
    # The second run keeps everything new in the shards' heads (no flush for an hour).
    gw = start_metricsgw(gw_dir, extra=[*TWO_SHARDS, "--storage.flush-interval=1h"])
    try:
        gw.wait_ready()
        load.start(gw.base_url)
        load.wait(lambda: len(load.acked) >= flushed + 60 * 20, "acknowledged writes (second run)")
        load.stop()
        assert set(load.statuses) == {204}
        assert assert_exactly_once(gw.base_url, load) == len(load.acked)  # table and both heads, once each
        status, body = _query(gw.base_url, "count(count_over_time(acked_test[2h]))")
        assert status == 200 and body["data"]["result"][0]["value"][1] == "60" and "warnings" not in body, body
        request = build_request([{"matchers": [("__name__", "=", "acked_test")], "start": 0, "end": 2**62}])
        # Remote read (Prometheus's remote_read) through the front: the querier's table and the shards' heads.
        status, _, raw = post(gw.base_url + "/api/v1/read", request)
        assert status == 200, raw
        read = decode_samples(raw)[0]
        assert len(read) == 60 and sum(len(v) for v in read.values()) == len(load.acked)
        # ?scope=head on the front (what a gateway on another machine asks) is both shards' heads together.
        per_shard = []
        for sock in _sockets(gw_dir):
            status, headers, raw = unix_post(sock, "/api/v1/read?scope=head", request, HEADERS)
            assert status == 200, raw
            per_shard.append((int(headers[TABLE_VERSION_HEADER]), decode_samples(raw)[0]))
        status, headers, raw = post(gw.base_url + "/api/v1/read?scope=head", request)
        assert status == 200, raw
        joined = decode_samples(raw)[0]
        assert all(series for _, series in per_shard)  # split by series: each shard holds some
        assert joined == {**per_shard[0][1], **per_shard[1][1]} and len(joined) == 60
        assert sum(len(v) for v in joined.values()) == len(load.acked) - flushed  # the heads: the second run
        assert int(headers[TABLE_VERSION_HEADER]) == max(v for v, _ in per_shard)
        shard = children(gw.pid)["shard-1"]
        shard.suspend()  # alive, not answering: the front says 503 naming it, never a partial "complete" answer
        try:
            status, _, raw = post(gw.base_url + "/api/v1/read?scope=head", request)
            assert status == 503 and b"ingest shard 1" in raw, (status, raw)
        finally:
            shard.resume()
        status, _, raw = post(gw.base_url + "/api/v1/read?scope=tail", request)
        assert status == 400 and b"scope" in raw, raw  # the querier refuses it as a single process does
    finally:
        load.stop()
        gw.stop()


def test_reload_and_sighup_reach_the_children_and_sigterm_stops_them_in_order(tmp_path):
    rules = tmp_path / "drop.yml"
    rules.write_text("[]\n")
    gw = start_metricsgw(tmp_path / "gw", extra=[*TWO_SHARDS, f"--rules.file={rules}", "--web.enable-lifecycle"])
    try:
        gw.wait_ready()

        def write(name: str, t_ms: int) -> None:
            assert remote_write(gw.base_url, encode_v1([([("__name__", name)], [(t_ms, 1.0)])]))[0] == 204

        def dropped() -> float:
            return metric(gw.base_url, "metricsgw_discarded_samples_total", reason="relabel_drop")  # all shards

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
    assert "proc=shard-0" in log and "proc=shard-1" in log and "proc=querier-0" in log and "stopped" in log
    # The shard flushed on the way out: its samples are in the table's Parquet files.
    assert any((tmp_path / "gw" / "data" / "table" / "samples").rglob("*.parquet"))


def _front_proxied(base_url: str) -> list[dict]:
    """Where the front sent queries: requests it proxied and connections it passed on (procs/handoff.py)."""
    return [dict(labels) for (name, labels), _ in own_metrics(base_url).items()
            if name in ("metricsgw_front_proxied_requests_total", "metricsgw_front_handed_off_connections_total")]


def _kept(base_url: str) -> bool:
    """dropme holds a sample written after the reload (the first was written before any drop rule)."""
    status, body = api(base_url, "/api/v1/query", {"query": "count_over_time(dropme[2h])", "time": time.time()})
    return status == 200 and bool(body["data"]["result"]) and float(body["data"]["result"][0]["value"][1]) >= 2


def test_children_die_with_the_front_even_when_it_is_killed(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=TWO_SHARDS)
    kids = []
    try:
        kids = wait_for(lambda: set(c := children(gw.pid)) == CHILDREN and list(c.values()), "every child")
        gw.wait_ready()
        os.kill(gw.pid, signal.SIGKILL)  # only the front: no chance to stop its children itself
        gw.proc.wait()
        gone, alive = psutil.wait_procs(kids, timeout=30)
        for orphan in alive:  # do not leave them running when this fails
            orphan.kill()
        assert not alive, f"children outlived the front: {alive}"
    finally:
        gw.kill()


def test_a_changed_layout_after_kill_9_replays_the_old_writers_wals_first(tmp_path):
    """Acknowledged samples in the WAL of a writer the new layout does not have (one process -> 2 shards ->
    1 shard, each run ended by kill -9) are flushed into the table at start, then read once through the front."""
    gw_dir = tmp_path / "gw"
    load = AckedLoad("", _base_ms(), writers=2, series=30)
    for extra in (["--server.single-process"], TWO_SHARDS, ["--ingest.shards=1"]):
        gw = start_metricsgw(gw_dir, extra=[*extra, "--storage.flush-interval=1h"])
        try:
            gw.wait_ready()
            acked_before = len(load.acked)
            load.start(gw.base_url)
            load.wait(lambda: len(load.acked) >= acked_before + 30 * 10, f"acknowledged writes with {extra}")
            load.stop()
            assert set(load.statuses) == {204}
            assert assert_exactly_once(gw.base_url, load) == len(load.acked)
        finally:
            load.stop()
            gw.kill()  # every process at once: what is acknowledged is in the WALs only
    assert "flushing it into the table first" in gw.log_tail(100_000)


ONE_EACH = ["--ingest.shards=1", "--query.processes=1"]  # 2 cores' default: connections are handed off too
# What a user must never read in an answer (issue 29): a socket path, an exception's class name.
_INTERNAL = re.compile(r"/|\.sock|\b\w+(Error|Exception)\b")


def _port_open(base_url: str) -> bool:
    host, port = base_url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def _plain(text: str) -> str:
    assert not _INTERNAL.search(text), f"internal names in an answer: {text!r}"
    return text


def _every_kind_at_once(base_url: str, t_ms: int) -> dict[str, tuple[int, str]]:
    """/-/ready, a query, a metadata call, a remote write and the tsdb status, sent together; each answer checked:
    the right one, or a retryable 503 in plain words. {kind: (status, what the refusal says)}."""
    def ready():
        status, body = http_get(base_url + "/-/ready", timeout=60)
        text = body.decode()
        assert (status, text) == (200, "metricsgw is Ready.\n") or (
            status == 503 and text.startswith("Service Unavailable: ")), (status, text)
        return status, _plain(text)

    def api_call(path, params, right):
        def call():
            status, body = api(base_url, path, params, timeout=60)
            if status == 200:
                assert right(body["data"]), body
                return 200, ""
            assert status == 503 and body["errorType"] == "unavailable", (status, body)
            return 503, _plain(body["error"])
        return call

    def write():
        status, text, headers = remote_write(base_url, encode_v1([([("__name__", "plain_probe")], [(t_ms, 1.0)])]),
                                             timeout=60)
        assert status == 204 or (status == 503 and headers.get("Retry-After")), (status, text)
        return status, _plain(text)

    calls = {"ready": ready, "write": write,
             "query": api_call("/api/v1/query", {"query": "vector(1)", "time": 10},
                               lambda data: data["result"][0]["value"] == [10, "1"]),
             "labels": api_call("/api/v1/labels", {}, lambda data: isinstance(data, list)),
             "tsdb": api_call("/api/v1/status/tsdb", {}, lambda data: "headStats" in data)}
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = {kind: pool.submit(call) for kind, call in calls.items()}
        return {kind: f.result() for kind, f in futures.items()}


def test_from_the_first_moment_and_through_kill_9_answers_are_right_or_a_plain_retryable_503(tmp_path):
    """Issue 29. Requests sent the moment the port opens, and while the front brings back a query process or the
    shard after kill -9, get the right answer or a 503 Prometheus and Grafana retry, naming the part in plain words
    (never a socket path or an exception's class); /-/ready says which part is starting or restarting; afterwards
    every acknowledged sample is read once. The restarted process is held before it listens (testhooks.py) for as
    long as the test looks, so what it sees does not depend on how fast a start is."""
    hold = QueryHold(tmp_path / "hold")
    gw = start_metricsgw(tmp_path / "gw", env=hold.env, extra=ONE_EACH)
    load = AckedLoad(gw.base_url, _base_ms(), writers=1, series=20)
    try:
        wait_for(lambda: gw.proc.poll() is not None or _port_open(gw.base_url), "the front listening")
        _every_kind_at_once(gw.base_url, _base_ms())  # its children are starting: they cannot be listening yet
        gw.wait_ready()
        # a write needs no query process, and the tsdb status is the shards' own
        for name, held in (("querier-0", {"ready", "query", "labels"}),
                           ("shard-0", {"ready", "query", "labels", "write", "tsdb"})):
            acked_before = len(load.acked)
            load.start(gw.base_url)
            load.wait(lambda: len(load.acked) >= acked_before + 20 * 10, f"acknowledged writes before {name} dies")
            load.stop()  # a write on a connection passed to the shard would die with it (docs/processes.md: hand-off)
            hold.hold_start(name)
            children(gw.pid)[name].kill()
            hold.wait(lambda: hold.starts_held(name) == 1, f"the front restarting {name}, held before it listens")
            got = _every_kind_at_once(gw.base_url, _base_ms())
            refused = {kind for kind, (status, _) in got.items() if status == 503}
            assert refused == held, got
            restarting = f"{PLAIN_NAMES[name]} is restarting (killed by SIGKILL)"
            assert all(restarting in text for kind, (_, text) in got.items() if kind in held), got
            hold.release_start(name)
            gw.wait_ready()
            assert {kind: status for kind, (status, _) in _every_kind_at_once(gw.base_url, _base_ms()).items()} == {
                "ready": 200, "write": 204, "query": 200, "labels": 200, "tsdb": 200}
        assert set(load.statuses) == {204}
        assert assert_exactly_once(gw.base_url, load) == len(load.acked)
    finally:
        load.stop()
        hold.release_start("querier-0")
        hold.release_start("shard-0")
        gw.stop()
