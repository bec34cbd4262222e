"""A peer whose query slots are all taken still serves its recent data.

A querier waits for its peers while it holds one of its own query slots. If reading a peer's head
needed one of the peer's query slots, two busy gateways would each wait for the other until
--cluster.peer-timeout. Gateway B here has one query slot, held by a query stopped by the test
hook; gateway A's query must still get B's samples, complete and without a warning."""

from __future__ import annotations

import threading

from testkit.procs import free_port, start_metricsgw
from tests.dashboards.loading import aligned_now_ms, write_series
from tests.e2e.client import api
from tests.guard.helpers import QueryHold


def test_a_peer_busy_with_its_own_queries_still_answers_for_its_head(tmp_path):
    hold = QueryHold(tmp_path / "hold")
    port_b = free_port()
    b = start_metricsgw(tmp_path / "b", port=port_b, env=hold.env, extra=["--query.max-concurrency=1"])
    a = start_metricsgw(tmp_path / "a", extra=[f"--cluster.peers=http://127.0.0.1:{port_b}",
                                               "--cluster.peer-timeout=2m", "--query.max-concurrency=1"])
    try:
        a.wait_ready()
        b.wait_ready()
        now = aligned_now_ms()
        write_series(a.base_url, [([("__name__", "busy_m"), ("on", "a")], [(now, 1.0)])])
        write_series(b.base_url, [([("__name__", "busy_m"), ("on", "b")], [(now, 2.0)])])
        hold.engage()
        held = threading.Thread(target=api, args=(b.base_url, "/api/v1/query", {"query": "up" + QueryHold.HELD}),
                                kwargs={"timeout": 300})
        held.start()
        hold.wait(lambda: hold.reached() == 1, "B's only query slot held")
        status, body = api(a.base_url, "/api/v1/query", {"query": "sum(busy_m)", "time": now / 1000}, timeout=300)
        assert status == 200 and "warnings" not in body, body
        assert body["data"]["result"][0]["value"][1] == "3"
        assert hold.reached() == 1 and hold.endings() == []  # B's query was held all along
        hold.release()
        held.join(60)
    finally:
        hold.release()
        a.stop()
        b.stop()
