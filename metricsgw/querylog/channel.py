"""A query process's query records, to the front that owns the query log (owner.py).

A query process may answer a client the front never sees (a connection handed off to it, procs/handoff.py), so
the front cannot learn a query's outcome from the answer it relays: each query process tells it. Over a Unix
stream socket in the gateway's run directory (``queries.sock``, mode 0700 like the others), each record is a
query log line (record.py) and a newline.

The sender never makes a query wait: ``send`` puts the record in a bounded queue a task drains. A full queue,
a line too long, or a front that cannot be reached drops the record, counted by ``on_drop(reason, n)``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable

from .record import QueryRecord, from_line, to_line

log = logging.getLogger(__name__)

# The child's setting (procs/layout.py child_config) naming the front's socket; absent: not a query process.
RECORDS_SOCKET = "query_records_socket"
SOCKET_NAME = "queries.sock"
MAX_QUEUED = 10_000  # records waiting to be sent
MAX_LINE = 4 << 20  # a record's line (its query text is within --query.max-length)


class RecordSender:
    def __init__(self, path: str, on_drop: Callable[[str, int], None], max_queued: int = MAX_QUEUED) -> None:
        self.path = path
        self.on_drop = on_drop
        self.max_queued = max_queued
        self._queue: asyncio.Queue[bytes] | None = None
        self._task: asyncio.Task | None = None

    def send(self, record: QueryRecord) -> None:
        """On the event loop; returns at once."""
        line = (json.dumps(to_line(record), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        if len(line) > MAX_LINE:
            self.on_drop("too_large", 1)
            return
        if self._task is None:  # made in the running loop, at the first query
            self._queue = asyncio.Queue(self.max_queued)
            self._task = asyncio.get_running_loop().create_task(self._run())
        try:
            self._queue.put_nowait(line)
        except asyncio.QueueFull:
            self.on_drop("channel_full", 1)

    async def _run(self) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            while True:
                line = await self._queue.get()
                try:
                    if writer is None:
                        _, writer = await asyncio.open_unix_connection(self.path)
                    writer.write(line)
                    await writer.drain()
                except OSError as err:  # the front is stopping: it takes its children with it
                    self.on_drop("front_unreachable", 1)
                    log.debug("query record not sent to the front: %s", err)
                    if writer is not None:
                        writer.close()
                    writer = None
        finally:
            if writer is not None:
                writer.close()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def serve_records(path: str, receive: Callable[[QueryRecord], None]) -> asyncio.AbstractServer:
    """The front's end: every query process's records, read line by line and passed to ``receive``."""

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    receive(from_line(json.loads(line)))
                except (ValueError, KeyError, TypeError) as err:  # a bug, not a client: our own processes write it
                    log.warning("unreadable query record from a query process: %s", err)
        except (ConnectionError, ValueError):  # the child ended; a line past MAX_LINE (the sender drops those)
            pass
        finally:
            writer.close()

    return await asyncio.start_unix_server(connected, path, limit=MAX_LINE)
