"""The process's query memory budget (``--query.max-memory``), split once into its parts.

One number a user sets bounds everything queries hold at once: DuckDB gets a fixed share as
its ``memory_limit``, the decoded-sample cache another, the range-query results cache (promql/results_cache.py)
another, the series archive's index (storage/catalog/archive.py) another, and the rest is the pool that running
queries charge as they load samples, build result matrices and render JSON
(``QueryContext.charge_bytes``). A query that would push the pool past its size fails with a
503 naming the setting (retry later); the guard admits a queued query only while the pool has
room for a fair share (``QueryGuard``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import Unavailable

SETTING = "--query.max-memory"
DUCKDB_SHARE = 0.1875  # DuckDB's memory_limit: its hash tables, Parquet decoding buffers
CACHE_SHARE = 0.0625  # decoded samples of recently read files (dashboards re-read them)
RESULTS_SHARE = 0.125  # range-query answers, so a refresh evaluates only its new steps
ARCHIVE_SHARE = 0.03125  # the index of the series on disk (40 B a series); past it, it borrows from the queries' pool
MIN_DUCKDB_BYTES = 64 << 20  # DuckDB refuses to work well below this


@dataclass(frozen=True)
class MemoryShares:
    total: int
    duckdb: int
    cache: int
    results: int
    archive: int
    queries: int  # what running queries may hold together

    @classmethod
    def of(cls, total: int) -> "MemoryShares":
        duckdb = max(int(total * DUCKDB_SHARE), MIN_DUCKDB_BYTES)
        cache = int(total * CACHE_SHARE)
        results = int(total * RESULTS_SHARE)
        archive = int(total * ARCHIVE_SHARE)
        return cls(total, duckdb, cache, results, archive, max(total - duckdb - cache - results - archive, 1 << 20))


class MemoryPool:
    """Bytes held by running queries, all together. Thread-safe: charged from query threads."""

    def __init__(self, size: int, max_concurrency: int = 1, total_text: str = "") -> None:
        self.size = size
        self.total_text = total_text or str(size)  # the user's --query.max-memory, for messages
        # A queued query starts only while at least this much is free (unless nothing runs).
        self.admit_bytes = size // max(2 * max_concurrency, 1)
        self.used = 0
        self.peak = 0
        self._lock = threading.Lock()

    def take(self, n: int, stage: str) -> None:
        with self._lock:
            if self.used + n > self.size:
                raise Unavailable(
                    f"query memory exhausted in {stage}: running queries hold {self.used:,} bytes and this one "
                    f"needs {n:,} more (limit {SETTING}={self.total_text}, of which queries get {self.size:,}); retry later or narrow the query")
            self.used += n
            self.peak = max(self.peak, self.used)

    def give(self, n: int) -> None:
        with self._lock:
            self.used = max(0, self.used - n)

    def has_room(self) -> bool:
        return self.used + self.admit_bytes <= self.size


def pool_for(shares: MemoryShares, max_concurrency: int) -> MemoryPool:
    return MemoryPool(shares.queries, max_concurrency, _human(shares.total))


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % (size // 16) == 0:
            return f"{n / size:g}{unit}"
    return str(n)
