"""--query.log-file: lines appended by the writer thread, reopened on request (logrotate), and dropped, counted, when
the buffer is full or the file cannot be written; a query never waits for the disk."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from metricsgw.config import ConfigError
from metricsgw.querylog.logfile import QueryLogFile


class Drops:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, reason: str, n: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + n


def _read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _until(pred, what: str) -> None:
    deadline = time.monotonic() + 30  # a liveness bound only
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_lines_are_appended_as_json_one_per_line(tmp_path):
    path = tmp_path / "q.log"
    path.write_text('{"before":1}\n')  # appended to, as Prometheus opens it
    drops = Drops()
    f = QueryLogFile(str(path), drops)
    for i in range(100):
        f.write({"i": i, "query": 'up{job="é"}'})
    f.close()
    assert _read(path) == [{"before": 1}] + [{"i": i, "query": 'up{job="é"}'} for i in range(100)]
    assert drops.counts == {}


def test_reopen_follows_a_rotated_file(tmp_path):
    path = tmp_path / "q.log"
    f = QueryLogFile(str(path), Drops())
    f.write({"n": 1})
    _until(lambda: path.exists() and path.read_text(), "the first line written")
    os.rename(path, tmp_path / "q.log.1")
    f.reopen()
    f.write({"n": 2})
    f.close()
    assert _read(tmp_path / "q.log.1") == [{"n": 1}] and _read(path) == [{"n": 2}]


def test_a_full_buffer_drops_lines_instead_of_waiting(tmp_path):
    entered, go_on = threading.Event(), threading.Event()

    class SlowDisk:
        def __init__(self, real) -> None:
            self.real = real

        def write(self, text: str) -> None:
            entered.set()
            assert go_on.wait(60)
            self.real.write(text)

        def flush(self) -> None:
            self.real.flush()

        def close(self) -> None:
            self.real.close()

    class OnSlowDisk(QueryLogFile):
        def _open(self):
            return SlowDisk(super()._open())

    drops = Drops()
    path = tmp_path / "q.log"
    f = OnSlowDisk(str(path), drops, max_buffered=3)
    f.write({"n": 0})
    assert entered.wait(60)  # the writer holds line 0 at the disk
    for n in range(1, 6):
        f.write({"n": n})  # 1-3 wait in the buffer, 4 and 5 are dropped
    assert drops.counts == {"buffer_full": 2}
    go_on.set()
    f.close()
    assert [line["n"] for line in _read(path)] == [0, 1, 2, 3]


def test_a_file_that_cannot_be_written_drops_lines_until_it_can(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / "q.log"
    drops = Drops()
    f = QueryLogFile(str(path), drops)
    path.unlink()
    folder.rmdir()
    f.reopen()  # as at logrotate, but the folder is gone
    f.write({"n": 1})
    _until(lambda: drops.counts.get("write_error") == 1, "the line dropped")
    folder.mkdir()
    f.write({"n": 2})
    f.close()
    assert _read(path) == [{"n": 2}] and drops.counts == {"write_error": 1}


def test_a_path_that_cannot_be_opened_at_start_names_the_flag(tmp_path):
    with pytest.raises(ConfigError, match="--query.log-file"):
        QueryLogFile(str(tmp_path / "missing" / "q.log"), Drops())
