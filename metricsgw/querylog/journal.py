"""The queries the status endpoints show: the recent slow, refused, timed-out, canceled and failed ones, and the
most frequent and slowest of the last N (VictoriaMetrics' ``/api/v1/status/top_queries``).

Memory is bounded whatever the queries: every list is a ring of at most a number of entries and a number of
bytes (a query's text may be 64 KiB), the oldest out first. Runs on the event loop of the process that owns the
query log (no lock: records and the endpoints' reads both come there).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Generic, Iterator, TypeVar

from .record import QueryRecord

RECENT_KINDS = ("slow", "refused", "timeout", "canceled", "error")
# Bytes one list may hold, counted as its queries' text plus an entry's own overhead.
RECENT_BYTES = 8 << 20
LAST_QUERIES_BYTES = 32 << 20
LINE_OVERHEAD = 1024  # a log line's dicts and strings beside the query text
STAT_OVERHEAD = 128  # a (query, range, time, duration, bytes) entry

T = TypeVar("T")


class Ring(Generic[T]):
    """The newest entries within ``max_items`` and ``max_bytes`` (the newest one is always kept)."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        self.max_items, self.max_bytes = max_items, max_bytes
        self._items: collections.deque[tuple[T, int]] = collections.deque()
        self.bytes = 0

    def add(self, item: T, size: int) -> None:
        if self.max_items <= 0:
            return
        self._items.append((item, size))
        self.bytes += size
        while len(self._items) > self.max_items or (self.bytes > self.max_bytes and len(self._items) > 1):
            self.bytes -= self._items.popleft()[1]

    def __len__(self) -> int:
        return len(self._items)

    def newest_first(self) -> Iterator[T]:
        return (item for item, _ in reversed(self._items))


@dataclass(frozen=True)
class Stat:
    query: str
    range_s: int  # VictoriaMetrics keys its figures by (query, whole seconds of the window)
    ts: float
    duration_s: float
    peak_bytes: int


class QueryJournal:
    def __init__(self, recent: int, last_queries: int) -> None:
        self.recent_size = recent
        self.recent = {kind: Ring[dict](recent, RECENT_BYTES) for kind in RECENT_KINDS}
        self.last = Ring[Stat](last_queries, LAST_QUERIES_BYTES)
        self.last_queries = last_queries

    def add(self, record: QueryRecord, line: dict[str, Any], slow: bool) -> None:
        """``line``: the record as the query log writes it (what the recent lists answer)."""
        self.last.add(Stat(record.query, int(record.range_s), record.ts, record.total_s, record.peak_bytes),
                      len(record.query) + STAT_OVERHEAD)
        kinds = (["slow"] if slow else []) + ([record.status] if record.status != "ok" else [])
        for kind in kinds:
            self.recent[kind].add(line, len(record.query) + LINE_OVERHEAD)

    def recent_lists(self, kinds: list[str], limit: int) -> dict[str, list[dict]]:
        """The newest ``limit`` entries of each of ``kinds``, newest first."""
        out = {}
        for kind in kinds:
            entries = self.recent[kind].newest_first()
            out[kind] = [e for _, e in zip(range(limit), entries)]
        return out

    def top(self, top_n: int, max_lifetime_s: float, now: float) -> dict[str, list[dict]]:
        """VictoriaMetrics' four lists over the last queries that ended within ``max_lifetime_s``."""
        groups: dict[tuple[str, int], list[float]] = {}  # key -> [count, sum of durations, sum of peak bytes]
        for s in self.last.newest_first():
            if now - s.ts > max_lifetime_s:
                continue
            g = groups.setdefault((s.query, s.range_s), [0, 0.0, 0])
            g[0] += 1
            g[1] += s.duration_s
            g[2] += s.peak_bytes

        def ranked(value, row) -> list[dict]:
            order = sorted(groups.items(), key=lambda kv: value(kv[1]), reverse=True)[:max(top_n, 0)]
            return [{"query": q, "timeRangeSeconds": r, **row(g)} for (q, r), g in order]

        return {
            "topByCount": ranked(lambda g: g[0], lambda g: {"count": g[0]}),
            "topByAvgDuration": ranked(lambda g: g[1] / g[0],
                                       lambda g: {"avgDurationSeconds": round(g[1] / g[0], 3), "count": g[0]}),
            "topBySumDuration": ranked(lambda g: g[1],
                                       lambda g: {"sumDurationSeconds": round(g[1], 3), "count": g[0]}),
            "topByAvgMemoryUsage": ranked(lambda g: g[2] / g[0],
                                          lambda g: {"avgMemoryBytes": int(g[2] // g[0]), "count": g[0]}),
        }
