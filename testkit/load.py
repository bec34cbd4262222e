"""Remote-write load driver: pre-encode every request, then send them over N connections.

Encoding happens before the clock starts, so the figure measures the receiver, not us.
Each connection owns a shard of the series and sends its requests in order; a 5xx or 429
is retried with exponential backoff (30ms .. 5s, as Prometheus's queue manager does;
Prometheus itself only retries 429 with `retry_on_http_429`), so no series goes out of order.
The run is bounded by a request count (all pre-encoded) and by `time_limit_s`.
Loopback targets only. Its command line is bench/load.py.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

import aiohttp
import numpy as np

from testkit.wire import Request, build_requests, metadata_request

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "User-Agent": "metricsgw-bench/0.1",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
MIN_BACKOFF_S, MAX_BACKOFF_S = 0.03, 5.0
MAX_ATTEMPTS = 10


@dataclass
class LoadResult:
    samples_ok: int = 0
    samples_failed: int = 0
    requests_ok: int = 0
    requests_failed: int = 0
    requests_not_sent: int = 0  # left when the time limit hit
    retries: int = 0
    bytes_sent: int = 0
    wall_s: float = 0.0
    status_counts: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    first_error: str = ""

    @property
    def samples_per_s(self) -> float:
        return self.samples_ok / self.wall_s if self.wall_s > 0 else 0.0

    def latency_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("latencies_ms")
        d |= {"samples_per_s": round(self.samples_per_s, 1), "latency_p50_ms": round(self.latency_ms(50), 2),
              "latency_p99_ms": round(self.latency_ms(99), 2)}
        return d


def check_loopback(url: str) -> None:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"refusing to send load to non-loopback host {host!r}")


async def _send_one(session: aiohttp.ClientSession, url: str, req: Request, res: LoadResult,
                    deadline: float, max_attempts: int = MAX_ATTEMPTS) -> bool:
    """One request with Prometheus-style retries; False once the deadline stops us."""
    backoff = MIN_BACKOFF_S
    for attempt in range(max_attempts):
        if time.monotonic() >= deadline:
            return False
        t0 = time.perf_counter()
        status, text = 0, ""
        try:
            async with session.post(url, data=req.body, headers=HEADERS) as resp:
                status = resp.status
                text = await resp.text() if status >= 300 else ""
                retry_after = resp.headers.get("Retry-After")
        except (aiohttp.ClientError, asyncio.TimeoutError) as err:
            text, retry_after = f"{type(err).__name__}: {err}", None
        res.latencies_ms.append((time.perf_counter() - t0) * 1000)
        key = str(status or "conn_error")
        res.status_counts[key] = res.status_counts.get(key, 0) + 1
        res.bytes_sent += len(req.body)
        if 200 <= status < 300:
            res.requests_ok += 1
            res.samples_ok += req.samples
            return True
        if not res.first_error:
            res.first_error = f"{key}: {text[:300]}"
        if status and status < 500 and status != 429:  # bad data: Prometheus drops it, so do we
            break
        res.retries += 1
        wait = backoff
        if retry_after and retry_after.isdigit():
            wait = max(wait, float(retry_after))
        await asyncio.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        backoff = min(backoff * 2, MAX_BACKOFF_S)
    res.requests_failed += 1
    res.samples_failed += req.samples
    return True


async def send_all(url: str, shards: list[list[Request]], time_limit_s: float = 300.0,
                   preamble: list[Request] | None = None, timeout_s: float = 30.0,
                   max_attempts: int = MAX_ATTEMPTS) -> LoadResult:
    """Send `preamble` (e.g. metadata) first, then each shard on its own connection.
    A request is tried up to `max_attempts` times (Prometheus itself retries a 5xx forever)."""
    check_loopback(url)
    res = LoadResult()
    connector = aiohttp.TCPConnector(limit=max(1, len(shards)))
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        deadline = time.monotonic() + time_limit_s
        for req in preamble or []:
            await _send_one(session, url, req, res, deadline, max_attempts)

        async def run_shard(reqs: list[Request]) -> None:
            for n, req in enumerate(reqs):
                if not await _send_one(session, url, req, res, deadline, max_attempts):
                    res.requests_not_sent += len(reqs) - n
                    return

        t0 = time.perf_counter()
        await asyncio.gather(*(run_shard(r) for r in shards))
        res.wall_s = time.perf_counter() - t0
    return res


@dataclass
class Plan:
    """What to send: a workload, a time range and a request shape."""

    nodes: int = 100
    seed: int = 0
    duration_s: float = 120.0  # span of simulated data
    interval_s: float = 15.0  # scrape interval
    connections: int = 4
    samples_per_request: int = 2000
    samples_per_series: int = 1
    end_ms: int | None = None  # last scrape time; default: now (receivers reject far-away data)

    @property
    def scrapes(self) -> int:
        return max(1, int(self.duration_s // self.interval_s))


def prepare(plan: Plan, workload=None):
    """(workload, metadata preamble, shards): everything encoded, nothing sent."""
    from testkit.workload import Workload

    workload = workload or Workload(plan.nodes, plan.seed)
    interval_ms = int(plan.interval_s * 1000)
    end_ms = plan.end_ms if plan.end_ms is not None else int(time.time() * 1000) // interval_ms * interval_ms
    start_ms = end_ms - (plan.scrapes - 1) * interval_ms
    shards = build_requests(workload, start_ms, plan.scrapes, interval_ms, plan.connections,
                            plan.samples_per_request, plan.samples_per_series)
    return workload, [metadata_request(workload)], shards
