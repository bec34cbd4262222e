"""A client that leaves stops its query; a full queue answers 429 at once.

One query slot and one queue place, so what the guard does is observable from outside: its own
metrics, and who gets a slot. The queries that must still be running when the test acts are held
by the server's test hook (metricsgw/testhooks.py) rather than made "heavy enough", which only
held on a busy machine.
"""

from __future__ import annotations

import threading

from tests.guard.conftest import server_fixture
from tests.guard.helpers import api_with_headers, metric, send_and_hang_up, timed_api

server = server_fixture(["--query.max-concurrency=1", "--query.max-queue=1", "--query.queue-timeout=1s"])

HEAVY = 'count({__name__=~".+"})'  # every one of the ~202k series
REJECTED = "metricsgw_guard_rejections_total"


def test_disconnect_stops_the_work(server, loaded):
    hold = server.hold
    hold.engage()
    try:
        before = metric(server.base_url, REJECTED, limit="client_disconnect")
        reached, ended = hold.reached(), len(hold.endings())
        # The query works (a core busy) at the hold until the client hangs up; the hold is never
        # released, so the only way it can end is the cancellation the disconnect must cause.
        send_and_hang_up(server.base_url, "/api/v1/query",
                         [("query", HEAVY + hold.HELD_BUSY), ("time", loaded.end_s)],
                         wait=lambda: hold.wait(lambda: hold.reached() == reached + 1, "the query is held"))
        hold.wait(lambda: len(hold.endings()) == ended + 1, "the held query stopped after the client left")
        assert hold.endings()[-1] == "canceled"
        assert metric(server.base_url, REJECTED, limit="client_disconnect") == before + 1
        # The slot is given back only once the worker has stopped (api/running.py).
        hold.wait(lambda: metric(server.base_url, "metricsgw_queries_inflight") == 0, "the slot is free again")
    finally:
        hold.release()
    # the one slot is free: the next query runs at once (the queue would 503 it after 1 s otherwise)
    status, body, _ = timed_api(server.base_url, "/api/v1/query",
                                {"query": "count(DCGM_FI_DEV_GPU_TEMP)", "time": loaded.end_s}, method="POST")
    assert status == 200, body


def test_full_queue_is_429_with_retry_after(server, loaded):
    hold = server.hold
    before = {k: metric(server.base_url, REJECTED, limit=k) for k in ("max_queue", "queue_timeout")}
    results: dict[str, tuple[int, dict, dict]] = {}

    def ask(name: str, query: str) -> threading.Thread:
        def run():
            results[name] = api_with_headers(server.base_url, "/api/v1/query", {"query": query, "time": loaded.end_s})
        t = threading.Thread(target=run)
        t.start()
        return t

    hold.engage()
    try:
        reached = hold.reached()
        running = ask("running", HEAVY + hold.HELD)  # takes the one slot and keeps it
        hold.wait(lambda: hold.reached() == reached + 1, "the first query holds the slot")
        queued = ask("queued", "count(DCGM_FI_DEV_GPU_TEMP)")  # takes the one queue place
        hold.wait(lambda: metric(server.base_url, "metricsgw_queries_queued") == 1, "the second query is queued")
        results["full"] = api_with_headers(server.base_url, "/api/v1/query",
                                           {"query": "count(DCGM_FI_DEV_GPU_TEMP)", "time": loaded.end_s})
        queued.join(60)  # gives up after --query.queue-timeout=1s, the slot still taken
    finally:
        hold.release()
    running.join(120)

    status, body, headers = results["full"]
    assert status == 429, body
    assert body["errorType"] == "unavailable"
    assert "--query.max-concurrency=1" in body["error"] and "--query.max-queue=1" in body["error"]
    assert int(headers["Retry-After"]) >= 1
    status, body, headers = results["queued"]
    assert status == 503, body
    assert body["errorType"] == "unavailable" and "--query.queue-timeout" in body["error"]
    assert "Retry-After" in headers
    status, body, _ = results["running"]  # released, it ran to the end
    assert status == 200 and body["data"]["result"][0]["value"][1] == str(loaded.num_series), body
    assert hold.endings()[-1] == "released"
    assert metric(server.base_url, REJECTED, limit="max_queue") == before["max_queue"] + 1
    assert metric(server.base_url, REJECTED, limit="queue_timeout") == before["queue_timeout"] + 1
