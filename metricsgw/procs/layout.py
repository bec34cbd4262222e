"""Which processes one gateway runs, where they listen, and the settings each child gets (pure).

Budgets that are per gateway are split so the gateway as a whole keeps them:
- ingest shards: ``--ingest.max-series`` and ``--ingest.max-series-per-metric`` are divided by the number of
  shards (rounded up). The distributor spreads series by hash, so each shard holds about 1/N of every metric;
  the gateway admits up to the limit, give or take the hash's unevenness (a few per cent at thousands of
  series). Per-series limits (label count and lengths, sample age) apply unchanged.
- query processes: ``--query.max-memory``, ``--query.max-concurrency`` and ``--query.max-queue`` are divided
  by the number of query processes (at least 1 slot each); per-query limits (``--query.max-samples``,
  ``--query.max-memory-per-query``, ``--query.timeout``) apply unchanged to every query.

Queries never run in a shard's process. A query process is a follower of the table (every writer's flushed
series and samples) and reads the shards' heads (``SHARD_SOCKETS``: a query that cannot read one fails) and the
front's own peers, the other gateways: docs/cluster.md. Shards have no peers and load only their own series.

Children listen on Unix sockets in ``<--storage.path>/run/<--storage.writer-id>/`` (mode 0700: only this user
reaches them; the front does TLS and authentication for everyone), or in a private temporary directory when
that path is too long for a socket address. The writer id is in the path because gateways sharing one
``--storage.path`` on one machine (docs/cluster.md "Many machines") must not bind, or unlink, each other's
sockets: each gateway's writer id is unique on the table, so its directory is its own.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from ..config import SHARD_SOCKETS, Config
from ..querylog.channel import RECORDS_SOCKET, SOCKET_NAME

# Default counts, measured on 2 cores (docs/processes.md): a shard per 2 cores, because the front's split of
# a request over 2 shards costs more CPU than passing one shard the body undecoded (so 2 shards on 2 cores
# ingest less per CPU-second than 1), and a query process per 4 cores, at least one: each holds the whole
# series catalog, and dashboards (a few at a time, each bounded by the query guard) fit in one.
CORES_PER_SHARD = 2
CORES_PER_QUERIER = 4
_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux


# A child's exit code when it cannot start with its settings (writer id in use, a bad setting): the front stops the
# gateway instead of restarting it (supervisor.py)
EXIT_REFUSED = 3


@dataclass(frozen=True)
class Child:
    role: str  # "shard" or "querier"
    index: int
    socket: str

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class Layout:
    shards: int
    queriers: int
    run_dir: str
    cpus: int = 0  # the machine's cores (0: os.cpu_count()), split over the query processes

    @property
    def children(self) -> list[Child]:
        return ([Child("shard", i, os.path.join(self.run_dir, f"shard-{i}.sock")) for i in range(self.shards)]
                + [Child("querier", i, os.path.join(self.run_dir, f"querier-{i}.sock")) for i in range(self.queriers)])

    @property
    def front_socket(self) -> str:
        """The front's own socket: a query process relays there what the front answers (handoff.py)."""
        return os.path.join(self.run_dir, "front.sock")

    @property
    def records_socket(self) -> str:
        """Where the query processes send the front their query records (querylog/channel.py)."""
        return os.path.join(self.run_dir, SOCKET_NAME)

    def handoff_socket(self, child: Child) -> str:
        """Where ``child`` (a query process, or the one ingest shard) takes client connections from the front
        (handoff.py)."""
        return os.path.join(self.run_dir, f"{child.role}-{child.index}.pass")  # no longer than its .sock

    @property
    def shard_children(self) -> list[Child]:
        return [c for c in self.children if c.role == "shard"]

    @property
    def query_targets(self) -> list[Child]:
        """Where the front sends queries: the query processes (never a shard)."""
        return [c for c in self.children if c.role == "querier"]


def resolve(cfg: Config, cpus: int | None = None, run_dir: str | None = None) -> Layout:
    """``--ingest.shards`` shards (0 = one per 2 cores) and ``--query.processes`` query processes (0 = one per 4
    cores), at least one of each."""
    cpus = cpus or os.cpu_count() or 1
    shards = cfg.ingest_shards or max(1, cpus // CORES_PER_SHARD)
    queriers = cfg.query_processes or max(1, cpus // CORES_PER_QUERIER)
    return Layout(shards, queriers, run_dir or socket_dir(cfg.storage_path, cfg.storage_writer_id), cpus)


def socket_dir(storage_path: str, writer_id: str) -> str:
    """``<storage>/run/<writer id>`` made private (0700, and ``run`` too), or a private temporary directory if
    its socket paths would be longer than a socket address allows."""
    run = os.path.join(os.path.abspath(storage_path), "run")
    path = os.path.join(run, writer_id)
    if len(os.path.join(path, "querier-999.sock")) > _MAX_SOCKET_PATH:
        return tempfile.mkdtemp(prefix=f"metricsgw-{writer_id}-")  # created 0700
    os.makedirs(path, mode=0o700, exist_ok=True)
    for d in (run, path):
        os.chmod(d, 0o700)  # existing directories too
    return path


def unlink_socket(path: str) -> None:
    """Remove a socket a process of this gateway listens on: at start (left by a predecessor that was killed) and at
    stop (a copy of a stopped gateway's directory, a backup or a test's, must not meet a socket)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def shard_writer_id(writer_id: str, index: int, shards: int) -> str:
    """Shard i writes to the table under --storage.path as writer ``<--storage.writer-id>-s<i>`` (its own WAL
    and files; docs/cluster.md). One shard keeps the id itself: it is the one-process gateway's writer, so it
    replays that WAL and loads that writer's series. A writer id no shard has any more (another shard
    count) is flushed by the front at start (orphans.py)."""
    return writer_id if shards == 1 else f"{writer_id}-s{index}"


def querier_writer_id(writer_id: str, index: int) -> str:
    """Query process i's writer id ``<--storage.writer-id>-q<i>``: it receives no writes, but every process on
    the table has its own id (and lock), so it never meets a shard's or another gateway's WAL."""
    return f"{writer_id}-q{index}"


def _share(total: int, parts: int) -> int:
    return -(-total // parts) if total else 0  # ceil; 0 stays "no limit"


def child_config(cfg: Config, child: Child, layout: Layout) -> Config:
    """The settings of ``child``: the front's, with the per-gateway budgets split and the front's own duties
    (TLS, authentication, the lifecycle gate) taken off: the child's socket is reached only through the front."""
    v = dict(cfg.values)
    v.update(web_config_file="", web_write_only_users=[], web_read_only_users=[], web_enable_lifecycle=True,
             server_single_process=True, query_log_file="")  # the front writes the query log
    if child.role == "shard":  # it answers only head reads (its own head) for the queriers and the front
        v["storage_writer_id"] = shard_writer_id(cfg.storage_writer_id, child.index, layout.shards)
        v["ingest_max_series"] = _share(cfg.ingest_max_series, layout.shards)
        v["ingest_max_series_per_metric"] = _share(cfg.ingest_max_series_per_metric, layout.shards)
        v["cluster_peers"] = []
        v["storage_follow_others"] = False
    else:
        q = layout.queriers
        v["storage_writer_id"] = querier_writer_id(cfg.storage_writer_id, child.index)
        v[SHARD_SOCKETS] = [c.socket for c in layout.shard_children]
        v[RECORDS_SOCKET] = layout.records_socket
        v["query_max_memory"] = max(cfg.query_max_memory // q, 1)
        v["query_max_concurrency"] = max(cfg.query_max_concurrency // q, 1)
        v["query_max_queue"] = cfg.query_max_queue // q
        v["query_max_workers_per_query"] = cfg.query_max_workers_per_query or max(1, (layout.cpus or os.cpu_count() or 1) // q)
    return Config(v)

