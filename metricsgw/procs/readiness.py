"""When a child can take requests, and the front's short wait for one that cannot yet (issue 29).

A child has *started* once it answers its ``/-/ready`` with anything but "replaying the WAL": its storage is
open (WAL replayed, series catalog loaded), so what it answers is whole. Until then -- a second or two after
the front starts it, at first and after each restart -- a query it answered could miss data without a warning,
and a call could meet no socket at all. The supervisor asks every 50 ms from the moment it starts a child
(``until_started``); a child that answers "the WAL cannot be written" has started: its own 503s on writes say
that better than a wait here would.

The front holds a request for a child that has not started for up to ``HOLD_S``: a start (about a second on 2
cores) and a first restart (0.5 s of backoff and a start) usually fit, so a client mostly sees its answer a
little late rather than an error; then it answers 503 naming the part (unavailable.py). ``HOLD_S`` is far
below what clients wait (Prometheus's remote_timeout and Grafana's query timeout: 30 s).
"""

from __future__ import annotations

import asyncio

import aiohttp

from ..storage.not_ready import REPLAYING
from .clients import ChildClient, least_busy

HOLD_S = 5.0
PROBE_EVERY_S = 0.05
_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=5)


def hold_within(timeout_s: float) -> float:
    """The hold of a request whose asker gives up after ``timeout_s`` (a peer gateway's head read): half of it at
    most, so that the asker still gets the refusal that says why."""
    return min(HOLD_S, timeout_s / 2)


def started(status: int, text: str) -> bool:
    """Whether a child's /-/ready answer says it has started."""
    return status == 200 or REPLAYING not in text


async def until_started(socket: str) -> None:
    """Returns once the child listening on ``socket`` (or about to) has started."""
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket), timeout=_PROBE_TIMEOUT) as s:
        while True:
            try:
                async with s.get("http://child/-/ready") as resp:
                    if started(resp.status, await resp.text(errors="replace")):
                        return
            except (aiohttp.ClientError, OSError):  # not listening yet (a timeout is an OSError too)
                pass
            await asyncio.sleep(PROBE_EVERY_S)


async def wait_started(clients: list[ChildClient], hold_s: float = HOLD_S) -> list[ChildClient]:
    """Waits at most ``hold_s`` for every one of ``clients`` to have started; those that have not by then."""
    await _wait([c for c in clients if not c.started], hold_s, asyncio.ALL_COMPLETED)
    return [c for c in clients if not c.started]


async def one_started(clients: list[ChildClient], hold_s: float = HOLD_S) -> ChildClient | None:
    """The least busy of ``clients`` that has started, waiting at most ``hold_s`` for one; None if none has."""
    if not any(c.started for c in clients):
        await _wait(clients, hold_s, asyncio.FIRST_COMPLETED)
    up = [c for c in clients if c.started]
    return least_busy(up) if up else None


async def _wait(clients: list[ChildClient], hold_s: float, until: str) -> None:
    if not clients or hold_s <= 0:
        return
    waits = [asyncio.ensure_future(c.proc.started.wait()) for c in clients]
    try:
        await asyncio.wait(waits, timeout=hold_s, return_when=until)
    finally:  # also when the client hung up (this handler cancelled)
        for w in waits:
            w.cancel()
