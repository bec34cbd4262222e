"""The query guard: at most ``max_concurrency`` queries run; up to ``max_queue`` wait, in order.

``async with guard.slot("query_range"):`` waits for a slot. A full queue answers at once with
``TooManyRequests`` (429 + Retry-After), so Grafana backs off instead of piling on; a query that
waited longer than ``queue_timeout_s`` gets ``Unavailable`` (503). A finished query hands its
slot straight to the oldest waiter, so a newcomer cannot overtake the queue.

With a memory pool (``--query.max-memory``), a query also waits while the running ones hold
so much that a fair share (pool / 2 x concurrency) is not free; when nothing runs, the oldest
waiter always starts (its own budgets then bound it).

At shutdown ``close()`` admits no more queries (503) and cancels the running ones through the
``QueryContext`` each passed to ``slot``, so they stop at their next check instead of running on
while storage closes under them.

Runs on the event loop (not thread-safe by design: slots are taken before work goes to threads).
"""

from __future__ import annotations

import asyncio
import collections
import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from ..errors import TooManyRequests, Unavailable
from .memory import SETTING as MEMORY_SETTING
from .memory import MemoryPool


class QueryGuard:
    def __init__(self, max_concurrency: int, max_queue: int, queue_timeout_s: float, telemetry: Any = None,
                 concurrency_flag: str = "--query.max-concurrency", pool: MemoryPool | None = None) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.max_concurrency = max_concurrency
        self.concurrency_flag = concurrency_flag  # the setting refusals name (remote reads have their own)
        self.max_queue = max(0, max_queue)
        self.queue_timeout_s = queue_timeout_s
        self.telemetry = telemetry
        self.pool = pool
        self.running = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._contexts: dict[int, Any] = {}  # id -> QueryContext of each query holding a slot
        self.closed = False

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, kind: str = "query", ctx: Any = None) -> AsyncIterator[None]:
        await self._acquire(kind)
        if ctx is not None:
            self._contexts[id(ctx)] = ctx
        try:
            yield
        finally:
            self._contexts.pop(id(ctx), None)
            self._release()

    def close(self) -> None:
        """Shutdown: refuse new and queued queries, cancel the running ones."""
        self.closed = True
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(_shutting_down())
        for ctx in list(self._contexts.values()):
            ctx.cancel("the server is shutting down")
        self._report()

    async def _acquire(self, kind: str) -> None:
        if self.closed:
            raise _shutting_down()
        if self.running < self.max_concurrency and not self._waiters and self._fits():
            self.running += 1
            self._report()
            return
        if len(self._waiters) >= self.max_queue:
            self._rejected("max_queue")
            full = TooManyRequests(
                f"too many queries: {self.running} running and {len(self._waiters)} queued "
                f"(limits {self.concurrency_flag}={self.max_concurrency}, --query.max-queue={self.max_queue}); "
                f"{kind} refused, retry later", retry_after_s=self._retry_after())
            full.setting = "--query.max-queue"  # the message names the concurrency first: the queue is what refused
            raise full
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._report()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.queue_timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if fut.done() and not fut.cancelled():
                self._release()  # the slot was handed to us just as we gave up: pass it on
            else:
                fut.cancel()
                self._remove(fut)
            self._report()
            if isinstance(exc, asyncio.CancelledError):
                raise
            self._rejected("queue_timeout")
            # name the memory budget when it is what holds the queue up
            short = self.pool is not None and not self.pool.has_room()
            memory = f", {MEMORY_SETTING}={self.pool.total_text} (in use)" if short else ""
            waited = Unavailable(
                f"{kind} waited {self.queue_timeout_s:g}s for a query slot "
                f"(limits --query.queue-timeout={self.queue_timeout_s:g}s, "
                f"{self.concurrency_flag}={self.max_concurrency}{memory}); the server is overloaded, retry later",
                retry_after_s=self._retry_after())
            waited.setting = "--query.queue-timeout"
            raise waited from None
        # a slot handed over by admit(): running counts it already
        self._report()

    def _release(self) -> None:
        self.running -= 1
        self.admit()

    def admit(self) -> None:
        """Start the oldest waiters while slots and memory allow (also called when memory frees)."""
        while self._waiters and self.running < self.max_concurrency and self._fits():
            fut = self._waiters.popleft()
            if not fut.done():
                self.running += 1
                fut.set_result(None)  # the slot is theirs: running counts it already
        self._report()

    def _fits(self) -> bool:
        return self.running == 0 or self.pool is None or self.pool.has_room()

    def _remove(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def _retry_after(self) -> int:
        return max(1, math.ceil(min(self.queue_timeout_s, 60.0)))

    def _rejected(self, limit: str) -> None:
        if self.telemetry is not None:
            self.telemetry.guard_rejections.labels(limit=limit).inc()

    def _report(self) -> None:
        if self.telemetry is not None:
            self.telemetry.queries_inflight.set(self.running)
            self.telemetry.queries_queued.set(len(self._waiters))


def _shutting_down() -> Unavailable:
    return Unavailable("the server is shutting down; retry after the restart")
