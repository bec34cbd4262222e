"""HTTP over the children's Unix sockets: one keep-alive connection pool per child, and its load.

The front runs on its event loop, so its client is aiohttp. A ``ChildClient`` of an ingest shard is what the
front's head read fans out over (cluster/gateway_head.py ``Shard``: its label, its session, a wait for it to
have started), so that module needs nothing of the process management here.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import aiohttp

from .layout import Child
from .unavailable import not_started, part

if TYPE_CHECKING:
    from .supervisor import ChildProcess

# The front passes bodies through as they are: a querier's answer is not decompressed on the way.
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=5)


class ChildClient:
    def __init__(self, child: Child, proc: ChildProcess | None = None) -> None:
        """``proc``: the supervisor's process of ``child``, whose state says whether it can take requests now
        (readiness.py); None for a child's client of the front, which no child outlives."""
        self.child = child
        self.proc = proc
        self.in_flight = 0  # requests the front has open to this child (least-busy routing)
        self._session: aiohttp.ClientSession | None = None

    @property
    def started(self) -> bool:
        return self.proc is None or self.proc.started.is_set()

    @property
    def label(self) -> str:
        return part(self.child)

    async def until_started(self, hold_s: float) -> str | None:
        """Waits at most ``hold_s`` for the child to have started; None once it has, else why not (a phrase
        following its label)."""
        if not self.started and hold_s > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.started.wait(), hold_s)
        return not_started(self)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # created inside the running loop
            self._session = aiohttp.ClientSession(
                base_url="http://child", connector=aiohttp.UnixConnector(path=self.child.socket, limit=0),
                timeout=_NO_TIMEOUT, auto_decompress=False, skip_auto_headers=("User-Agent",))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def least_busy(clients: list[ChildClient]) -> ChildClient:
    return min(clients, key=lambda c: c.in_flight)
