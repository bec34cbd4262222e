"""Put test data into a running server by remote write: the bench workload, extra series, a self-scrape.

The test harness does the heavy lifting (``testkit.wire.build_requests`` pre-encodes, ``testkit.load.send_all``
sends with Prometheus-style retries); series are sharded so each one's samples stay in time order
on one connection, which is what Prometheus's head needs.
"""

from __future__ import annotations

import asyncio
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from metricsgw.model import canonical
from metricsgw.remote.codec import encode_v1
from testkit.load import send_all
from testkit.procs import http_get
from testkit.wire import build_requests, metadata_request
from testkit.workload import Workload
from tests.e2e.client import api, remote_write

INTERVAL_MS = 15_000


class SmallControlPlaneWorkload(Workload):
    """The bench workload with one control-plane node: same metrics, a third of the apiserver series."""

    CONTROL_PLANE_NODES = 1


def aligned_now_ms(interval_ms: int = INTERVAL_MS) -> int:
    return int(time.time() * 1000) // interval_ms * interval_ms


def write_workload(write_url: str, workload: Workload, end_ms: int, scrapes: int,
                   interval_ms: int = INTERVAL_MS, shards: int = 2, samples_per_series: int = 1) -> int:
    """Send ``scrapes`` scrapes ending at ``end_ms``; returns samples sent. Raises if any request failed."""
    start_ms = end_ms - (scrapes - 1) * interval_ms
    reqs = build_requests(workload, start_ms, scrapes, interval_ms, shards, 4000, samples_per_series)
    res = asyncio.run(send_all(write_url, reqs, 300.0, [metadata_request(workload)]))
    if res.requests_failed or res.requests_not_sent:
        raise RuntimeError(f"remote write to {write_url} failed: {res.summary()}")
    return res.samples_ok


def write_series(base_url: str, series) -> None:
    """``series``: [(label pairs, [(t_ms, value), ...])] in one request (labels sorted, as Prometheus sends)."""
    body = encode_v1([(sorted(labels), samples) for labels, samples in series])
    status, text, _ = remote_write(base_url, body)
    if status != 204:
        raise RuntimeError(f"remote write to {base_url}: {status} {text}")


def exposition_to_series(text: str, job: str, instance: str, t_ms: int) -> list[tuple[list, list]]:
    """A /metrics page as remote-write series, labelled like a scrape would label them."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = canonical([("__name__", s.name), ("job", job), ("instance", instance), *s.labels.items()])
            out.append((list(labels), [(t_ms, float(s.value))]))
    return out


def scrape(target_url: str) -> str:
    status, body = http_get(target_url + "/metrics")
    if status != 200:
        raise RuntimeError(f"scrape of {target_url}/metrics: {status}")
    return body.decode()


def scrape_into(server_urls: list[str], target_url: str, job: str, instance: str, t_ms: int) -> list:
    """Scrape ``target_url``/metrics once and write the same series, stamped ``t_ms``, to every server, with the
    ``up`` series a scrape adds; returns the label sets written."""
    up = (list(canonical([("__name__", "up"), ("job", job), ("instance", instance)])), [(t_ms, 1.0)])
    series = [up, *exposition_to_series(scrape(target_url), job, instance, t_ms)]
    for url in server_urls:
        write_series(url, series)
    return [labels for labels, _ in series]


def provoke_discard_and_guard_rejection(base_url: str) -> None:
    """Make metricsgw count a discarded sample (invalid label name) and a guard rejection (1 µs timeout),
    so the labelled counters behind those dashboard panels exist."""
    try:
        write_series(base_url, [([("__name__", "bad_series"), ("0invalid", "x")], [(aligned_now_ms(), 1.0)])])
    except RuntimeError:
        pass  # the 400 is expected: the discard counter is what we want
    api(base_url, "/api/v1/query", {"query": 'count_over_time({__name__=~".+"}[30m])', "timeout": "0.000001"})


def in_parallel(calls: list[tuple]) -> None:
    """Run each ``(fn, *args)`` in a thread of its own (loads of several servers at once); the first
    error of any of them is raised here, once all have finished."""
    errors: list[BaseException] = []

    def one(fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as err:  # noqa: BLE001 (re-raised below, in the caller's thread)
            errors.append(err)

    threads = [threading.Thread(target=one, args=call) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
