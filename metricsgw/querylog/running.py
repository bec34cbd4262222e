"""The PromQL queries a process is answering now: waiting for a slot or evaluating, with their text, who sent
them, how long they have run and what they hold; and their cancellation by an administrator.

A query is listed from the moment its parameters are read until it is answered. Cancelling one cancels its
``QueryContext``: an evaluating query stops at its next check (DuckDB at once), a queued one as soon as it gets
its slot, and its client gets 499 ``canceled`` naming who stopped it. Runs on the event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .record import Source, params_of, request_of


@dataclass
class RunningQuery:
    query: str
    source: Source
    start: float | None
    end: float | None
    step: float
    ctx: Any  # limits.context.QueryContext
    since: float  # time.monotonic() when it arrived


class RunningQueries:
    def __init__(self) -> None:
        self._next_id = 1
        self._queries: dict[int, RunningQuery] = {}

    def add(self, query: RunningQuery) -> int:
        qid = self._next_id
        self._next_id += 1
        self._queries[qid] = query
        return qid

    def remove(self, qid: int) -> None:
        self._queries.pop(qid, None)

    def __len__(self) -> int:
        return len(self._queries)

    def cancel(self, qid: int, reason: str) -> bool:
        """False: no query of that id runs (it may have just ended)."""
        q = self._queries.get(qid)
        if q is None:
            return False
        q.ctx.cancel(reason)
        return True

    def listing(self) -> list[dict[str, Any]]:
        """Oldest first, as the query log's lines name things (record.py) plus ``id``, ``state`` and ``elapsed``."""
        now = time.monotonic()
        out = []
        for qid, q in self._queries.items():
            ctx = q.ctx
            entry: dict[str, Any] = {
                "id": str(qid),
                "state": "running" if ctx.admitted is not None else "queued",
                "elapsedSeconds": round(now - q.since, 3),
                "httpRequest": request_of(q.source),
                "params": params_of(q.query, q.start, q.end, q.step),
                "stats": {"samples": {"totalQueryableSamples": ctx.loaded_samples, "peakSamples": ctx.peak_samples}},
                "bytes": {"held": ctx.bytes, "peak": ctx.peak_bytes},
            }
            if q.source.user_agent:
                entry["userAgent"] = q.source.user_agent
            if q.source.grafana:
                entry["grafana"] = dict(q.source.grafana)
            out.append(entry)
        return out
