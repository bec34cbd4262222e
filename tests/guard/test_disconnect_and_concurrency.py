"""A client that leaves stops its query; a full queue answers 429 at once.

One query slot and one queue place, so what the guard does is observable from outside:
the server's CPU, its own metrics, and who gets a slot.
"""

from __future__ import annotations

import threading
import time

from tests.guard.conftest import server_fixture
from tests.guard.helpers import (api_with_headers, busy_fraction, cpu_seconds, metric, send_and_hang_up,
                                 timed_api)

server = server_fixture(["--query.max-concurrency=1", "--query.max-queue=1", "--query.queue-timeout=1s"])

HEAVY = 'count({__name__=~".+"})'  # every one of the ~202k series: seconds of CPU
REJECTED = "metricsgw_guard_rejections_total"


def _heavy(loaded) -> dict:
    return {"query": HEAVY, "time": loaded.end_s}


def _wait_for(pred, timeout_s: float, period_s: float = 0.05) -> float | None:
    """Seconds until pred() held, or None."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if pred():
            return time.perf_counter() - t0
        time.sleep(period_s)
    return None


def test_disconnect_stops_the_work(server, loaded):
    # The heavy query, run to the end, costs the server this much CPU: the work a disconnect must save.
    c0 = cpu_seconds(server.pid)
    status, body, full_s = timed_api(server.base_url, "/api/v1/query", _heavy(loaded), method="POST")
    full_cpu = cpu_seconds(server.pid) - c0
    assert status == 200 and body["data"]["result"][0]["value"][1] == str(loaded.num_series)
    assert full_cpu > 1.5, f"the query is not heavy enough to observe ({full_cpu:.2f} CPU s)"
    assert busy_fraction(server.pid, 0.5) < 0.2  # idle before

    before = metric(server.base_url, REJECTED, limit="client_disconnect")
    send_and_hang_up(server.base_url, "/api/v1/query", list(_heavy(loaded).items()), after_s=0.3)
    c_gone = cpu_seconds(server.pid)
    seen = _wait_for(lambda: metric(server.base_url, REJECTED, limit="client_disconnect") == before + 1, 2.0)
    assert seen is not None, "the server did not notice the client left"
    # The slot is given back only when the work has stopped, so inflight == 0 means stopped.
    freed = _wait_for(lambda: metric(server.base_url, "metricsgw_queries_inflight") == 0, 2.0)
    assert freed is not None, "the query kept running after the client left"
    time.sleep(1.0)
    after_cpu = cpu_seconds(server.pid) - c_gone
    print(f"full query {full_s:.2f}s / {full_cpu:.2f} CPU s; after hang-up: noticed in {seen:.2f}s, "
          f"slot free in {freed:.2f}s, {after_cpu:.2f} CPU s in the next ~1.5 s")
    # Had the work gone on, it would have used about a core for all of that time (~1.5 CPU s; the
    # full query runs ~4 s); measured 0.06-0.17 CPU s when idle, up to 0.55 with other load on the
    # machine (the /metrics polls above cost CPU too), so the bound is half of the continuing case.
    assert after_cpu < 0.75
    assert busy_fraction(server.pid, 0.5) < 0.2  # and the server is idle again

    # the one slot is free: the next query runs at once (the queue would 503 it after 1 s otherwise)
    status, body, _ = timed_api(server.base_url, "/api/v1/query",
                                {"query": "count(DCGM_FI_DEV_GPU_TEMP)", "time": loaded.end_s}, method="POST")
    assert status == 200, body


def test_full_queue_is_429_with_retry_after(server, loaded):
    before = {k: metric(server.base_url, REJECTED, limit=k) for k in ("max_queue", "queue_timeout")}
    results: list[tuple[int, dict, dict]] = []
    lock = threading.Lock()

    # A range query of the heavy expression (60 steps over all ~202k series): seconds even with
    # every label and sample cached, so the one that runs outlasts the other's 1 s in the queue.
    heavy_range = {"query": HEAVY, "start": loaded.end_s - 600, "end": loaded.end_s, "step": 10}
    took: list[float] = []

    def one():
        t0 = time.perf_counter()
        r = api_with_headers(server.base_url, "/api/v1/query_range", heavy_range)
        with lock:
            results.append(r)
            if r[0] == 200:
                took.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    by_status = {r[0]: r for r in results}
    print(f"the query that ran took {took}s")
    # one runs, one waits in the queue (and gives up after --query.queue-timeout), one finds it full
    assert sorted(r[0] for r in results) == [200, 429, 503], ([(r[0], r[1]) for r in results], took)
    _, body, headers = by_status[429]
    assert body["errorType"] == "unavailable"
    assert "--query.max-concurrency=1" in body["error"] and "--query.max-queue=1" in body["error"]
    assert int(headers["Retry-After"]) >= 1
    _, body, headers = by_status[503]
    assert body["errorType"] == "unavailable" and "--query.queue-timeout" in body["error"]
    assert "Retry-After" in headers
    assert metric(server.base_url, REJECTED, limit="max_queue") == before["max_queue"] + 1
    assert metric(server.base_url, REJECTED, limit="queue_timeout") == before["queue_timeout"] + 1
