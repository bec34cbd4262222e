"""The implementations of the read seam the conformance suite compares, each started, written and asked alike.

- ``memsource``: the engine over promql/memsource.py in this process (what the golden scripts use);
- ``single``: one gateway, one process (--server.single-process);
- ``default``: one gateway as a front, two ingest shards and a query process;
- ``cluster3``: three one-process gateways on one --storage.path (writer ids gw0..gw2), each with the other
  two as --cluster.peers; every series is written to one of them, by its id (what Prometheus's hashmod
  split does), and queries go to each in turn.

Nothing is flushed while a test asks (long flush interval, no size limit): data is in the table only where
``restart`` put it (a gateway flushes its head when it stops on SIGTERM).
"""

from __future__ import annotations

from pathlib import Path

from metricsgw.model import series_id
from metricsgw.remote.codec import encode_v1
from testkit.procs import Server, free_port, start_metricsgw
from tests.e2e.client import remote_write

LAYOUTS = ["memsource", "single", "default", "cluster3"]
GATEWAYS = ["single", "default", "cluster3"]
CLUSTER_SIZE = 3

UNFLUSHED = ["--storage.flush-interval=24h", "--storage.flush-max-samples=1000000000"]
# The golden scripts' samples are from 1970: kept (and accepted) only with a retention reaching back there.
RETENTION = ["--storage.retention.time=100y"]
FLAGS = {"single": ["--server.single-process"],
         "default": ["--ingest.shards=2", "--query.processes=1"],
         "cluster3": ["--server.single-process"]}
SAMPLES_PER_REQUEST = 20_000
READY_S = 120.0  # generous: two cores shared with other test runs


class Gateways:
    """One layout's gateways (one, or three sharing a table), on ports kept across restarts."""

    def __init__(self, layout: str, work: Path, flags: list[str]) -> None:
        self.layout = layout
        self.work = work
        self.flags = flags
        n = CLUSTER_SIZE if layout == "cluster3" else 1
        self.ports = [free_port() for _ in range(n)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self._asked = 0
        self.servers: list[Server] = [self._start(i) for i in range(n)]

    def _start(self, i: int) -> Server:
        extra = [*FLAGS[self.layout], *UNFLUSHED, *RETENTION, *self.flags]
        if self.layout == "cluster3":
            extra += [f"--storage.path={self.work / 'shared'}", f"--storage.writer-id=gw{i}",
                      *[f"--cluster.peers={u}" for u in self.urls if u != self.urls[i]]]
        return start_metricsgw(self.work / f"gw{i}", port=self.ports[i], extra=extra)

    @property
    def storage_path(self) -> Path:
        """The --storage.path its gateways share."""
        return self.work / ("shared" if self.layout == "cluster3" else "gw0/data")

    def wait_ready(self) -> None:
        for s in self.servers:
            s.wait_ready(READY_S)

    def write(self, series: list[tuple]) -> None:
        """``series``: [(labels, t_ms array, values array)], each series' samples in time order; a series goes
        to one gateway of the layout."""
        parts: list[list[tuple]] = [[] for _ in self.urls]
        for labels, t, v in series:
            parts[series_id(labels) % len(self.urls)].append((list(labels), list(zip(t.tolist(), v.tolist()))))
        for url, part in zip(self.urls, parts):
            for body in _requests(part):
                status, text, _ = remote_write(url, body)
                assert status == 204, (self.layout, url, status, text)

    def url(self) -> str:
        """The gateway to ask next (each of a cluster's in turn)."""
        self._asked += 1
        return self.urls[self._asked % len(self.urls)]

    def restart(self) -> None:
        """Stop every gateway (each flushes its head to the table), then start them again."""
        for s in self.servers:
            s.stop()
        self.servers = [self._start(i) for i in range(len(self.servers))]
        self.wait_ready()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def _requests(series: list[tuple]):
    """Remote-write bodies of about SAMPLES_PER_REQUEST samples, whole series each."""
    batch, size = [], 0
    for s in series:
        batch.append(s)
        size += len(s[1])
        if size >= SAMPLES_PER_REQUEST:
            yield encode_v1(batch)
            batch, size = [], 0
    if batch:
        yield encode_v1(batch)


def start(work: Path, flags: tuple[str, ...] = ()) -> dict[str, Gateways]:
    """Every gateway layout, started side by side and ready, each gateway with ``flags`` too."""
    started = {}
    try:
        for layout in GATEWAYS:
            started[layout] = Gateways(layout, work / layout, list(flags))
        for g in started.values():
            g.wait_ready()
    except BaseException:
        stop(started)
        raise
    return started


def stop(started: dict[str, Gateways]) -> None:
    for g in started.values():
        g.stop()
