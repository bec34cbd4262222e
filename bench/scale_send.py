"""The real-time sender of bench.scale: scrapes released at wall-clock time into Prometheus-like shards.

Request j of scrape k is due at start + k * interval + j * interval / R and carries that time as
its samples' timestamp; it goes to shard j % connections, whose worker fills it from the template
just before sending it (so a sender that falls behind keeps a list of (scrape, request) pairs and
one values array per scrape, not their bodies), then sends it until a 2xx (5xx, 429 and
connection errors are retried with Prometheus's backoff, forever) or another 4xx (failed).
Request j of every scrape lives in one shard, which sends in order: the template's bytes for j
are never refilled while still being sent, and each series' samples arrive in time order.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from dataclasses import dataclass

import aiohttp

from bench.scale_wire import Template
from testkit.load import HEADERS, MAX_BACKOFF_S, MIN_BACKOFF_S

ATTEMPT_TIMEOUT_S = 30.0  # Prometheus's remote_timeout


@dataclass(frozen=True, slots=True)
class Sent:
    scrape: int
    due: float  # wall-clock seconds the request was due (= its samples' timestamp)
    first_send: float
    ack: float  # when it got its 2xx (or its final 4xx)
    samples: int
    retries: int
    ok: bool


class Sender:
    def __init__(self, url: str, workload, template: Template, interval_s: float, connections: int) -> None:
        self.url, self.workload, self.template = url, workload, template
        self.interval_s, self.connections = interval_s, connections
        self.start_s = (math.floor(time.time() / interval_s) + 1) * interval_s  # the next whole interval
        self.records: list[Sent] = []  # in the order they finished
        self.status_counts: dict[str, int] = {}
        self.first_error = ""
        self.encode_cpu_s: dict[int, float] = {}  # per scrape: values + filling + compressing, this thread's CPU
        self._queues: list[deque] = [deque() for _ in range(connections)]
        self._wake = [asyncio.Event() for _ in range(connections)]
        self._in_flight: list[float | None] = [None] * connections  # due time of the request each shard sends
        self._values: dict[int, object] = {}
        self._left: dict[int, int] = {}  # requests of a scrape not finished yet
        self._done: set[int] = set()
        self._scheduling = True
        self._abort = False
        self._workers: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    # -- what the recorder reads ---------------------------------------------------------------
    def behind(self, now: float) -> float:
        """Seconds the oldest request not yet finished is behind its due time (0 when none is waiting)."""
        dues = [d for d in self._in_flight if d is not None] + [q[0][2] for q in self._queues if q]
        return max(0.0, now - min(dues)) if dues else 0.0

    def first_scrape_done(self) -> bool:
        return 0 in self._done

    @property
    def done_scrapes(self) -> frozenset[int]:
        """Scrapes whose every request has finished."""
        return frozenset(self._done)

    def queued(self) -> int:
        return sum(len(q) for q in self._queues) + sum(d is not None for d in self._in_flight)

    # -- running ---------------------------------------------------------------------------------
    async def send_preamble(self, requests) -> None:
        """Metadata first, as Prometheus sends it, before the clock of the first scrape."""
        async with aiohttp.ClientSession() as session:
            for req in requests:
                async with session.post(self.url, data=req.body, headers=HEADERS) as resp:
                    await resp.read()

    async def run(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.connections)
        self._session = aiohttp.ClientSession(connector=connector,
                                              timeout=aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT_S))
        try:
            self._workers = [asyncio.create_task(self._worker(s)) for s in range(self.connections)]
            await self._schedule()
            await asyncio.gather(*self._workers)
        finally:
            await self._session.close()

    def stop_scheduling(self) -> None:
        self._scheduling = False

    async def drain(self, timeout_s: float) -> dict:
        """Wait for what is queued to be sent; after timeout_s, give up on the rest (counted as not sent)."""
        self._scheduling = False
        for w in self._wake:
            w.set()
        t0 = time.time()
        while self.queued() and time.time() - t0 < timeout_s:
            await asyncio.sleep(0.2)
        not_sent = sum(len(q) for q in self._queues)
        self._abort = True
        for q in self._queues:
            q.clear()
        for w in self._wake:
            w.set()
        await asyncio.gather(*self._workers, return_exceptions=True)
        return {"drain_s": round(time.time() - t0, 1), "requests_not_sent": not_sent}

    async def _schedule(self) -> None:
        n = self.template.num_requests
        step = self.interval_s / n
        k = 0
        next_values = asyncio.create_task(asyncio.to_thread(self._compute_values, 0))
        while self._scheduling:
            values, cpu = await next_values
            next_values = asyncio.create_task(asyncio.to_thread(self._compute_values, k + 1))
            self._values[k], self._left[k], self.encode_cpu_s[k] = values, n, cpu
            t_k = self.start_s + k * self.interval_s
            for j in range(n):
                due = t_k + j * step
                wait = due - time.time()
                if wait > 0.002:
                    await asyncio.sleep(wait)
                if not self._scheduling:
                    break
                s = j % self.connections
                self._queues[s].append((k, j, due, int(round(due * 1000))))
                self._wake[s].set()
            k += 1
        next_values.cancel()
        for w in self._wake:
            w.set()

    def fill(self, k: int, j: int, ts_ms: int) -> bytes:
        """Request j of scrape k, compressed (in the event loop, just before it is sent)."""
        return self.template.fill(j, self._values[k], ts_ms)

    def finished(self, k: int, j: int, sent: Sent) -> None:
        """Request j of scrape k got its 2xx, or failed for good."""
        self.records.append(sent)

    def _compute_values(self, k: int):
        c0 = time.thread_time()
        values = self.workload.samples_at(int(round((self.start_s + k * self.interval_s) * 1000)))
        return values, time.thread_time() - c0

    async def _worker(self, s: int) -> None:
        q, wake = self._queues[s], self._wake[s]
        while True:
            while not q:
                if self._abort or not self._scheduling:
                    return
                wake.clear()
                await wake.wait()
            k, j, due, ts_ms = q.popleft()
            self._in_flight[s] = due
            c0 = time.thread_time()
            body = self.fill(k, j, ts_ms)
            self.encode_cpu_s[k] += time.thread_time() - c0
            self.finished(k, j, await self._send(body, k, due, len(self.template.series_range(j))))
            self._in_flight[s] = None
            self._left[k] -= 1
            if self._left[k] == 0:
                del self._values[k], self._left[k]
                self._done.add(k)

    async def _send(self, body: bytes, k: int, due: float, samples: int) -> Sent:
        first = time.time()
        retries, backoff = 0, MIN_BACKOFF_S
        while True:
            status, text = 0, ""
            try:
                async with self._session.post(self.url, data=body, headers=HEADERS) as resp:
                    status = resp.status
                    text = await resp.text() if status >= 300 else ""
                    if status < 300:
                        await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                text = f"{type(err).__name__}: {err}"
            key = str(status or "conn_error")
            self.status_counts[key] = self.status_counts.get(key, 0) + 1
            ok = 200 <= status < 300
            if ok or (status and status < 500 and status != 429) or self._abort:
                if not ok and not self.first_error:
                    self.first_error = f"{key}: {text[:300]}"
                return Sent(k, due, first, time.time(), samples, retries, ok)
            if not self.first_error:
                self.first_error = f"{key} (retried): {text[:300]}"
            retries += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
