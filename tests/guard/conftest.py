"""Fixtures for the guard tests: one big data set, loaded once, and servers started on copies of it.

Loading ~200k series takes most of a minute on two cores, so the data is written once per
session (through remote write, with pre-encoded requests, like a real sender), the loading
server is stopped (which flushes the head to Parquet), and each test module starts its own
server, with the flags it needs, on a copy of that directory.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.load import Plan, prepare, send_all
from testkit.procs import Server, start_metricsgw
from testkit.workload import Workload
from testkit.wire import build_requests
from tests.guard.helpers import QueryHold

NODES = 520  # ~202k series (the GPU-cluster workload has ~390 series per node plus control plane)
SCRAPES = 3
INTERVAL_S = 15.0


@dataclass
class LoadedData:
    data_dir: Path
    workload: Workload
    start_ms: int  # first scrape
    end_ms: int  # last scrape
    num_series: int

    @property
    def end_s(self) -> float:
        return self.end_ms / 1000.0

    def later_requests(self, scrapes: int, shards: int = 1, samples_per_request: int = 2000):
        """Pre-encoded writes of the scrapes that follow the loaded ones (existing series only)."""
        interval_ms = int(INTERVAL_S * 1000)
        return build_requests(self.workload, self.end_ms + interval_ms, scrapes, interval_ms, shards,
                              samples_per_request)


@pytest.fixture(scope="session")
def loaded(tmp_path_factory) -> LoadedData:
    root = tmp_path_factory.mktemp("guard-load")
    interval_ms = int(INTERVAL_S * 1000)
    end_ms = int(time.time() * 1000) // interval_ms * interval_ms
    plan = Plan(nodes=NODES, duration_s=SCRAPES * INTERVAL_S, interval_s=INTERVAL_S, connections=2,
                samples_per_request=5000, end_ms=end_ms)
    workload, preamble, shards = prepare(plan)
    srv = start_metricsgw(root)
    try:
        srv.wait_ready()
        res = asyncio.run(send_all(srv.write_url, shards, time_limit_s=120.0, preamble=preamble))
        assert res.requests_failed == 0 and res.requests_not_sent == 0, res.summary()
    finally:
        assert srv.stop() == 0, srv.log_tail()
    return LoadedData(srv.data_dir, workload, end_ms - (SCRAPES - 1) * interval_ms, end_ms, workload.num_series)


def start_on_copy(loaded: LoadedData, work_dir: Path, flags: list[str], env: dict | None = None) -> Server:
    """A server with its own flags on a private copy of the loaded data."""
    shutil.copytree(loaded.data_dir, work_dir / "data")
    srv = start_metricsgw(work_dir, extra=flags, env=env)
    srv.wait_ready(timeout_s=90.0)
    return srv


def server_fixture(flags: list[str]):
    """A module-scoped fixture: a server on a copy of the loaded data, with these flags, and the
    test hook that holds marked queries (``srv.hold``, a helpers.QueryHold; released after each use)."""

    @pytest.fixture(scope="module")
    def _server(loaded, tmp_path_factory):
        work = tmp_path_factory.mktemp("guard-srv")
        hold = QueryHold(work / "hold")
        srv = start_on_copy(loaded, work, flags, env=hold.env)
        srv.hold = hold
        yield srv
        hold.release()
        srv.stop()

    return _server
