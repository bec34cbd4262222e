"""``--query.log-file``: one JSON line per query, appended by a thread of its own.

A query never waits for the disk: its line goes into a bounded buffer (``MAX_BUFFERED`` lines) and the writer
thread takes every line buffered at once, encodes and appends them, and flushes. A full buffer (the disk slower
than the queries for a while) or a failed write drops lines, counted by ``on_drop(reason, n)``
(``metricsgw_query_log_dropped_lines_total``), never a query's answer.

The file is opened as Prometheus opens its query_log_file (append, create), and reopened on ``reopen()``: at
SIGHUP and /-/reload, as Prometheus reopens it at every configuration reload, so logrotate may move it away
and signal. A file that cannot be opened at start-up stops the start (the flag is wrong); one that cannot be
reopened later drops lines, logged once, and is tried again at the next line.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from typing import IO, Any, Callable

from ..config import ConfigError

log = logging.getLogger(__name__)

MAX_BUFFERED = 10_000  # lines waiting for the writer thread


class QueryLogFile:
    def __init__(self, path: str, on_drop: Callable[[str, int], None], max_buffered: int = MAX_BUFFERED) -> None:
        self.path = path
        self.on_drop = on_drop
        self.max_buffered = max_buffered
        self._lines: collections.deque[dict[str, Any]] = collections.deque()
        self._cond = threading.Condition()
        self._reopen = False
        self._closed = False
        self._failing = False  # the last write or open failed (logged once until one succeeds)
        try:
            self._file: IO[str] | None = self._open()
        except OSError as err:
            raise ConfigError(f"--query.log-file {path}: {err}") from None
        self._thread = threading.Thread(target=self._run, name="query-log", daemon=True)
        self._thread.start()

    def write(self, line: dict[str, Any]) -> None:
        """Buffer one line (any thread; never blocks on the disk)."""
        with self._cond:
            if self._closed or len(self._lines) >= self.max_buffered:
                self.on_drop("buffer_full", 1)
                return
            self._lines.append(line)
            self._cond.notify()

    def reopen(self) -> None:
        with self._cond:
            self._reopen = True
            self._cond.notify()

    def close(self) -> None:
        """Write what is buffered, then close the file."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _open(self) -> IO[str]:
        return open(self.path, "a", encoding="utf-8")

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._lines or self._reopen or self._closed):
                    self._cond.wait()
                batch = list(self._lines)
                self._lines.clear()
                reopen, self._reopen, closed = self._reopen, False, self._closed
            if reopen:
                self._close_file()
            if batch:
                self._append(batch)
            if closed:
                self._close_file()
                return

    def _append(self, batch: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in batch)
        try:
            if self._file is None:
                self._file = self._open()
            self._file.write(text)
            self._file.flush()
        except OSError as err:
            self.on_drop("write_error", len(batch))
            self._close_file()  # opened again at the next batch: the disk may have room by then
            if not self._failing:
                log.error("query log %s cannot be written (%s); its lines are dropped until it can", self.path, err)
            self._failing = True
            return
        if self._failing:
            log.info("query log %s is written again", self.path)
            self._failing = False

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:  # a failed flush at close: those lines were counted when their write failed
                pass
            self._file = None
