"""The one owner of the query log: the lists the status endpoints answer and the ``--query.log-file``.

Queries run in several processes (the query processes of ``metricsgw serve``, or the one process of
``--server.single-process``); their records all come to one ``QueryLog``, in the front or in the single process,
so the file has one writer and the lists are the gateway's (channel.py carries a query process's records).
"""

from __future__ import annotations

from typing import Callable

from .journal import QueryJournal
from .logfile import QueryLogFile
from .record import QueryRecord, to_line


class QueryLog:
    def __init__(self, slow_s: float, recent: int, last_queries: int, file: QueryLogFile | None = None) -> None:
        self.slow_s = slow_s
        self.journal = QueryJournal(recent, last_queries)
        self.file = file

    @classmethod
    def from_config(cls, cfg, on_drop: Callable[[str, int], None]) -> "QueryLog":  # noqa: ANN001 (config.Config)
        file = QueryLogFile(cfg.query_log_file, on_drop) if cfg.query_log_file else None
        return cls(cfg.query_slow_duration, cfg.query_recent_queries, cfg.query_stats_last_queries, file)

    def add(self, record: QueryRecord) -> None:
        """On the event loop: into the lists now, into the file by its writer thread."""
        slow = self.slow_s > 0 and record.total_s >= self.slow_s
        line = to_line(record, slow)
        self.journal.add(record, line, slow)
        if self.file is not None:
            self.file.write(line)

    def reopen(self) -> None:
        """SIGHUP and /-/reload, as Prometheus reopens its query log at a configuration reload."""
        if self.file is not None:
            self.file.reopen()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
