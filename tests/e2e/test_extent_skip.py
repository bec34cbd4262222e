"""A real `metricsgw serve` (one ingest shard, one query process): the query process skips its shard's head read when
the shard's extent board (cluster/extent_board.py) says nothing held in memory falls in the window, and the answer is
the same as when it reads it. The hard case is a flush: the shard commits its head to the table and publishes an empty
memory with that table version, while the query process has not followed the table (its follow interval is an hour
here). A query that skips the read must then load that version itself, or the flushed samples are seen zero times."""

from __future__ import annotations

import time

from metricsgw.cluster.extent_board import BoardReader
from metricsgw.remote.codec import encode_v1
from testkit.procs import start_metricsgw
from tests.e2e.client import api, remote_write
from tests.e2e.procs_helpers import wait_for
from tests.guard.helpers import own_metrics

FLAGS = ["--ingest.shards=1", "--query.processes=1", "--storage.flush-max-samples=100",
         "--storage.follow-interval=1h"]
SERIES, POINTS, STEP_MS = 3, 50, 10_000


def _querier(base_url: str, name: str) -> float:
    """``name`` of the query process, summed over its other labels (peer, result)."""
    return sum(v for (n, labels), v in own_metrics(base_url).items() if n == name and ("process", "querier-0") in labels)


def _count(base_url: str, query: str, at_s: float) -> list[tuple[str, float]]:
    status, body = api(base_url, "/api/v1/query", {"query": query, "time": at_s}, timeout=60)
    assert status == 200 and not body.get("warnings"), body
    return sorted((r["metric"].get("s", ""), float(r["value"][1])) for r in body["data"]["result"])


def test_a_query_that_skips_the_head_read_still_sees_what_the_shard_just_flushed(tmp_path):
    gw = start_metricsgw(tmp_path / "gw", extra=FLAGS)
    try:
        gw.wait_ready()
        board = BoardReader(str(tmp_path / "gw" / "data" / "run" / "gw0" / "shard-0.extent"))
        base = (int(time.time()) - 1800) * 1000  # half an hour back
        series = [([("__name__", "board_test"), ("s", str(s))], [(base + i * STEP_MS, float(i)) for i in range(POINTS)])
                  for s in range(SERIES)]
        status, text, _ = remote_write(gw.base_url, encode_v1(series))
        assert status == 204, text
        # 150 samples >= --storage.flush-max-samples: the shard flushes within a second or two, then says so
        flushed = wait_for(lambda: (e := board.read()) is not None and e.min_t > e.max_t and e.version >= 0 and e,
                           "the shard's flush and its empty memory on the board")
        skipped = _querier(gw.base_url, "metricsgw_peer_reads_skipped_total")
        reads = _querier(gw.base_url, "metricsgw_peer_requests_total")
        at = (base + POINTS * STEP_MS) / 1000
        assert _count(gw.base_url, "count_over_time(board_test[1h])", at) == [(str(s), POINTS) for s in range(SERIES)]
        assert _querier(gw.base_url, "metricsgw_peer_reads_skipped_total") > skipped
        assert _querier(gw.base_url, "metricsgw_peer_requests_total") == reads

        # A sample in memory again: a window over it reads the head; a window an hour before it still skips
        recent = int(time.time() - 60) * 1000
        status, text, _ = remote_write(gw.base_url, encode_v1([([("__name__", "board_test"), ("s", "0")],
                                                                [(recent, 99.0)])]))
        assert status == 204, text
        held = board.read()
        assert held is not None and held.min_t <= recent <= held.max_t and held.version >= flushed.version
        assert _count(gw.base_url, "last_over_time(board_test[5m])", recent / 1000) == [("0", 99.0)]
        assert _querier(gw.base_url, "metricsgw_peer_requests_total") > reads
        skipped = _querier(gw.base_url, "metricsgw_peer_reads_skipped_total")
        assert _count(gw.base_url, "count_over_time(board_test[10m])", at) == [(str(s), POINTS) for s in range(SERIES)]
        assert _querier(gw.base_url, "metricsgw_peer_reads_skipped_total") > skipped
    finally:
        gw.stop()
