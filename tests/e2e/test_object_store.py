"""Gateways on separate directories (as on separate hosts) sharing one table on an S3 server (moto in server mode,
testkit/s3.py; docs/object-storage.md).

- Three gateways, in single processes and one as a front with shard and query processes, each with its own
  --storage.path and the others as its peers, take acknowledged loads, one of them killed with SIGKILL midway and
  restarted; each answers every sample of all three exactly once. Stopped, and two started again on empty
  directories (new hosts, no WAL; one fetching the others' files only as its queries read them,
  --storage.s3.cache-size), they still answer all of it from the store alone. The keys are in no page and no log.
- A store that ignores conditional writes (a proxy drops If-None-Match) stops the gateway at start, saying why.
- The store goes away under a gateway: its writes are still acknowledged (the WAL), its recent samples answered;
  a query that needs a newer table than it has fails with a plain 503; killed with SIGKILL meanwhile and
  restarted once the store is back, it catches up and the other gateway reads everything from the table.
- One of three gateways compacts and, restarted with a shorter retention, retires and deletes its old files while
  the others write: every sample acknowledged within retention is read exactly from every gateway.
"""

from __future__ import annotations

import time

import pytest

from testkit.procs import free_port, http_get, start_metricsgw
from testkit.s3 import ACCESS_KEY, SECRET_KEY, MotoServer, StoreProxy
from tests.e2e.acked import AckedLoad, assert_exactly_once, stored_samples
from tests.e2e.client import api
from tests.e2e.test_cluster_prometheus import _wait

FAST = ["--storage.flush-interval=1s", "--storage.follow-interval=1s"]


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def _store_flags(endpoint: str, bucket: str) -> list[str]:
    return [f"--storage.table-url=s3://{bucket}/metrics", f"--storage.s3.endpoint={endpoint}",
            "--storage.s3.region=us-east-1", "--storage.s3.force-path-style=true"]


def _load(url: str, first_series: int, requests: int = 20) -> AckedLoad:
    load = AckedLoad(url, int(time.time() * 1000) - 120_000, writers=1, series=10, step_ms=1000,
                     max_requests=requests, first_series=first_series).start()
    load.wait(lambda: load.next_i[0] >= requests, "the load's requests")
    load.stop()
    assert dict(load.statuses) == {204: requests}, load.statuses
    return load


def _keys(moto: MotoServer, bucket: str) -> list[str]:
    pages = moto.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="metrics/")
    return [o["Key"] for page in pages for o in page.get("Contents", ())]


def test_three_gateways_on_separate_directories_share_one_table(moto, tmp_path):
    bucket = moto.bucket("shared-by-three")
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    # single processes, and a front with its shard and query processes
    layouts = [["--server.single-process"], [], ["--server.single-process"]]

    def start(i: int, home: str, peers: bool = True, extra=()):
        peer = [f"--cluster.peers={u}" for u in urls if u != urls[i]] if peers else []
        return start_metricsgw(tmp_path / f"{home}{i}", port=ports[i], env=moto.env(),
                               extra=[f"--storage.writer-id=gw{i}", *layouts[i], *FAST, *peer, *extra,
                                      *_store_flags(moto.endpoint, bucket)])

    gws = [start(i, "host") for i in range(3)]
    try:
        for gw in gws:
            gw.wait_ready(120)
        loads = [_load(urls[i], first_series=100 * i) for i in range(2)]
        # gw2 is killed (SIGKILL) in the middle of its load and restarted on its directory: its WAL has the rest
        crashed = AckedLoad(urls[2], int(time.time() * 1000) - 120_000, writers=1, series=10, step_ms=1000,
                            max_requests=30, first_series=200).start()
        crashed.wait(lambda: len(crashed.acked) >= 100, "gw2 to acknowledge 10 requests")
        gws[2].kill()
        crashed.stop()
        gws[2] = start(2, "host")
        gws[2].wait_ready(120)
        crashed.start(urls[2])
        crashed.wait(lambda: crashed.next_i[0] >= 30, "the rest of gw2's load")
        crashed.stop()
        loads.append(crashed)
        for url in urls:
            for load in loads:
                assert_exactly_once(url, load)
        for url in urls:  # nor the keys on a page
            for path in ("/metrics", "/api/v1/status/flags", "/api/v1/status/config", "/api/v1/status/runtimeinfo"):
                status, body = http_get(url + path)
                assert status == 200, (path, status)
                assert SECRET_KEY.encode() not in body and ACCESS_KEY.encode() not in body, path
        for gw in gws:
            gw.stop()  # SIGTERM: the heads are flushed to the table
        keys = _keys(moto, bucket)
        assert {k.rsplit("/", 1)[1][:8] for k in keys if "/samples/hour=" in k} == {"part-gw0", "part-gw1", "part-gw2"}
        assert not [k for k in keys if "/wal/" in k]  # each WAL stays on its own directory
        for gw in gws:
            log = gw.log_path.read_text(errors="replace")
            assert SECRET_KEY not in log and ACCESS_KEY not in log

        # new hosts: empty directories, no WAL; everything acknowledged is answered from the store (gw1 fetching
        # the others' sample files as its queries need them, within a budget too small to keep any)
        gws = [start(0, "newhost", peers=False), start(1, "newhost", peers=False, extra=["--storage.s3.cache-size=1"])]
        for gw in gws:
            gw.wait_ready(120)
        for url in urls[:2]:
            for load in loads:
                assert_exactly_once(url, load)
        assert not list((tmp_path / "newhost1").rglob("part-gw[02]-*.parquet"))  # no copy kept past the read
    finally:
        for gw in gws:
            gw.stop()


def test_a_store_that_ignores_conditional_writes_stops_the_gateway(moto, tmp_path):
    bucket = moto.bucket("no-conditional-writes")
    proxy = StoreProxy(moto.endpoint, drop_conditional=True)
    try:
        gw = start_metricsgw(tmp_path, env=moto.env(), extra=_store_flags(proxy.endpoint, bucket))
        assert gw.proc.wait(120) == 2
        log = gw.log_tail()
        assert "ignores conditional writes" in log and "--storage.table-url" in log, log
        assert "Traceback" not in log and SECRET_KEY not in log
        assert not [k for k in _keys(moto, bucket) if "/table/" in k]  # nothing was written to a table
    finally:
        proxy.close()


def test_a_store_gone_away_keeps_writes_and_catches_up(moto, tmp_path):
    """gw0 reaches the store through a proxy that goes down; gw1 reaches it directly, and asks no peer: what it
    answers of gw0's samples it read from the table."""
    bucket = moto.bucket("gone-away")
    proxy = StoreProxy(moto.endpoint)
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]

    def start(i: int):
        endpoint, peers = (proxy.endpoint, [f"--cluster.peers={urls[1]}"]) if i == 0 else (moto.endpoint, [])
        return start_metricsgw(tmp_path / f"gw{i}", port=ports[i], env=moto.env(),
                               extra=[f"--storage.writer-id=gw{i}", "--server.single-process", *FAST, *peers,
                                      *_store_flags(endpoint, bucket)])

    gws = [start(0), start(1)]
    try:
        for gw in gws:
            gw.wait_ready(120)
        before = _load(urls[0], first_series=0)
        _wait("gw1 to read gw0's samples from the table", lambda: _all_there(urls[1], before))

        proxy.down()
        during = _load(urls[0], first_series=100)  # every write acknowledged: the WAL holds them
        assert_exactly_once(urls[0], before)  # the files here and the head answer
        assert_exactly_once(urls[0], during)
        # gw1 commits: its head's answer names a table version gw0 cannot load while the store is away
        _load(urls[1], first_series=200, requests=3)
        status, body = _wait("gw0 to need the newer table", lambda: _refused(urls[0]))
        assert status == 503 and "object store" in body["error"], body
        assert "Error" not in body["error"] and "/" not in body["error"].split("s3://", 1)[0], body["error"]

        gws[0].kill()  # SIGKILL while the store is away: what it acknowledged is in its WAL only
        proxy.up()
        gws[0] = start(0)
        gws[0].wait_ready(120)
        _wait("gw1 to read everything gw0 acknowledged from the table",
              lambda: _all_there(urls[1], before) and _all_there(urls[1], during))
        assert_exactly_once(urls[1], during)
        assert_exactly_once(urls[0], during)
    finally:
        for gw in gws:
            gw.stop()
        proxy.close()


def _all_there(url: str, load: AckedLoad) -> bool:
    try:
        assert_exactly_once(url, load)
    except AssertionError:
        return False
    return True


def _refused(url: str):
    status, body = api(url, "/api/v1/query", {"query": "count(acked_test)", "time": time.time()})
    return (status, body) if status != 200 else None


def test_compaction_and_retention_on_one_gateway_lose_nothing_acknowledged(moto, tmp_path):
    """gw0 compacts its files of a closed hour while gw1 and gw2 write and read the same table; killed (SIGKILL) and
    restarted with a 2 h retention, it retires its partition of 4 h ago and deletes its files from the store 5 s
    later (--storage.vacuum-delay) while gw1 writes on. Every sample acknowledged within the retention is read back
    exactly from every gateway; what gw0 held past it is gone from all three and from the bucket."""
    bucket = moto.bucket("compacted-and-retired")
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]

    def start(i: int, extra=()):
        peers = [f"--cluster.peers={u}" for u in urls if u != urls[i]]
        return start_metricsgw(tmp_path / f"gw{i}", port=ports[i], env=moto.env(),
                               extra=[f"--storage.writer-id=gw{i}", "--server.single-process", *FAST, *peers, *extra,
                                      *_store_flags(moto.endpoint, bucket)])

    def load_at(url: str, base_ms: int, first_series: int) -> AckedLoad:
        load = AckedLoad(url, base_ms, writers=1, series=10, step_ms=1000, max_requests=10,
                         first_series=first_series).start()
        load.wait(lambda: load.next_i[0] >= 10, "the load's requests")
        load.stop()
        assert dict(load.statuses) == {204: 10}, load.statuses
        return load

    now_ms = int(time.time() * 1000)
    old_hour = (now_ms - 4 * 3600_000) // 3600_000 * 3600_000
    gws = [start(i) for i in range(3)]
    try:
        for gw in gws:
            gw.wait_ready(120)
        old = load_at(urls[0], old_hour + 60_000, first_series=0)  # within the default retention for now
        kept = []
        for burst in range(3):  # three flushes into one closed hour: three files for compaction to merge
            kept.append(load_at(urls[0], now_ms - 90 * 60_000 + burst * 60_000, first_series=0))
            time.sleep(2.5)
        kept += [_load(urls[1], first_series=100), _load(urls[2], first_series=200), _load(urls[0], first_series=300)]
        _wait("gw0 to compact its files of the closed hour", lambda: "compacted" in gws[0].log_tail(100_000), 60)
        for url in urls:  # the hour of 4 h ago is in the table, and read, before the retention shortens
            assert_exactly_once(url, old)
        assert [k for k in _keys(moto, bucket) if f"/samples/hour={old_hour}/part-gw0" in k]

        gws[0].kill()
        gws[0] = start(0, ["--storage.retention.time=2h", "--storage.vacuum-delay=5s"])
        during = AckedLoad(urls[1], int(time.time() * 1000) - 60_000, writers=1, series=10, step_ms=1000,
                           max_requests=40, first_series=400).start()  # gw1 writes on through gw0's restart
        gws[0].wait_ready(120)
        _wait("gw0's retention pass", lambda: "retention:" in gws[0].log_tail(100_000), 60)
        during.wait(lambda: during.next_i[0] >= 40, "gw1's load")
        during.stop()
        assert dict(during.statuses) == {204: 40}, during.statuses
        kept.append(during)
        _wait("gw0's files of 4 h ago deleted from the store",
              lambda: not [k for k in _keys(moto, bucket) if f"/samples/hour={old_hour}/" in k], 60)

        for url in urls:
            for load in kept:
                assert_exactly_once(url, load)
            assert not stored_samples(url, old_hour, old_hour + 3600_000), url  # past gw0's retention: gone
        assert "Traceback" not in gws[0].log_tail(100_000)
    finally:
        for gw in gws:
            gw.stop()
