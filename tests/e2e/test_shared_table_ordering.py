"""A sample a peer flushed just before it answered is seen exactly once (docs/cluster.md, cluster/source.py).

Two gateways on one --storage.path: gateway B takes the writes and flushes once its head holds
FLUSH_AT samples; gateway A has B as its peer and never loads the table on its own
(--storage.follow-interval=24h), so its view is the one it read at start, before B committed. After
B's flush the samples are in the table only (B's ?scope=head answers none of them, naming the
version that holds them): a query, a series listing and a label listing on A must still find every
one of them, once. Without ``local.ensure_version`` (or with the local read before the peers' in a
metadata call) A reads its stale view and answers nothing. No timing: the flush is triggered by the
head's size and waited for as a condition.
"""

from __future__ import annotations

import time

from deltalake import DeltaTable

from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.e2e.test_cluster_prometheus import _wait
from tests.remote.read_client import build_request, decode_samples, post

SERIES = 50
FLUSH_AT = SERIES  # one request of one sample per series fills B's head: it flushes at its next check


def _head_of(url: str, now_ms: int) -> tuple[dict, int]:
    body = build_request([{"matchers": [("__name__", "=", "flushed_test")], "start": 0, "end": now_ms + 10**6}])
    status, headers, raw = post(url + "/api/v1/read?scope=head", body)
    assert status == 200
    return decode_samples(raw)[0], int(headers["X-Metricsgw-Table-Version"])


def _flushed(url: str, shared, now_ms: int) -> bool:
    """B holds none of them in memory and the table version it names holds them all."""
    held, version = _head_of(url, now_ms)
    if held or version < 0:
        return False
    rows = DeltaTable(str(shared / "table" / "samples"), version=version).get_add_actions(flatten=True)
    return sum(rows.column("num_records").to_pylist()) == SERIES


def _query(url: str, now_ms: int) -> None:
    status, got = api(url, "/api/v1/query", {"query": "count_over_time(flushed_test[1m])", "time": now_ms / 1000})
    assert status == 200 and "warnings" not in got, got
    assert {(r["metric"]["s"], r["value"][1]) for r in got["data"]["result"]} == \
        {(str(s), "1") for s in range(SERIES)}, "every flushed sample once"


def _series(url: str, now_ms: int) -> None:
    status, got = api(url, "/api/v1/series", {"match[]": "flushed_test", "start": now_ms / 1000 - 60,
                                              "end": now_ms / 1000 + 60})
    assert status == 200 and "warnings" not in got and len(got["data"]) == SERIES, got


def _label_values(url: str, now_ms: int) -> None:
    status, got = api(url, "/api/v1/label/s/values", {"start": now_ms / 1000 - 60, "end": now_ms / 1000 + 60})
    assert status == 200 and "warnings" not in got, got
    assert sorted(got["data"]) == sorted(str(s) for s in range(SERIES)), got


CALLS = (_query, _series, _label_values)


def test_samples_a_peer_flushed_before_answering_are_read_from_the_table_once(tmp_path):
    shared = tmp_path / "shared"
    common = [f"--storage.path={shared}", "--storage.flush-interval=24h", "--server.single-process"]
    b = start_metricsgw(tmp_path / "b", extra=common + ["--storage.writer-id=gwb",
                                                        f"--storage.flush-max-samples={FLUSH_AT}"])
    readers = []
    try:
        b.wait_ready()
        # One reader per call, so each call is the first to meet B's flush (a follow is not undone).
        readers = [start_metricsgw(tmp_path / f"a{i}", extra=common + [
            f"--storage.writer-id=gwa{i}", "--storage.follow-interval=24h", f"--cluster.peers={b.base_url}"])
            for i in range(len(CALLS))]
        for r in readers:
            r.wait_ready()  # each has read the table now: B has committed nothing yet
        now_ms = int(time.time()) * 1000
        body = encode_v1([((("__name__", "flushed_test"), ("s", str(s))), [(now_ms, float(s))]) for s in range(SERIES)])
        assert remote_write(b.base_url, body)[0] == 204
        _wait("B to flush its head", lambda: _flushed(b.base_url, shared, now_ms))
        for call, reader in zip(CALLS, readers):
            call(reader.base_url, now_ms)
    finally:
        for s in readers + [b]:
            s.stop()


def test_what_a_dead_peer_committed_is_read_from_the_table_with_a_warning(tmp_path):
    """B commits its head as it stops (SIGTERM flushes), then cannot answer: A, whose view of the table predates
    that commit and which never follows on its own, must read the table as it is now: every sample once, and a
    warning naming B (its head, had it kept one, would be missing). Without the refresh on a failed peer in
    cluster/source.py, A answers nothing."""
    shared = tmp_path / "shared"
    common = [f"--storage.path={shared}", "--storage.flush-interval=24h", "--server.single-process"]
    b = start_metricsgw(tmp_path / "b", extra=common + ["--storage.writer-id=gwb"])
    a = None
    try:
        b.wait_ready()
        a = start_metricsgw(tmp_path / "a", extra=common + [
            "--storage.writer-id=gwa", "--storage.follow-interval=24h", f"--cluster.peers={b.base_url}"])
        a.wait_ready()  # A has read the table: B has committed nothing yet
        now_ms = int(time.time()) * 1000
        body = encode_v1([((("__name__", "flushed_test"), ("s", str(s))), [(now_ms, float(s))]) for s in range(SERIES)])
        assert remote_write(b.base_url, body)[0] == 204
        b.stop()  # its last flush commits every sample, then it is gone
        assert sum(DeltaTable(str(shared / "table" / "samples")).get_add_actions(flatten=True)
                   .column("num_records").to_pylist()) == SERIES
        status, got = api(a.base_url, "/api/v1/query", {"query": "count_over_time(flushed_test[1m])",
                                                        "time": now_ms / 1000, "partial_response": "true"})
        assert status == 200, got
        assert any(b.base_url in w for w in got.get("warnings", [])), got
        assert {(r["metric"]["s"], r["value"][1]) for r in got["data"]["result"]} == \
            {(str(s), "1") for s in range(SERIES)}, "every committed sample once"
    finally:
        for s in ([a] if a else []) + [b]:
            s.stop()
