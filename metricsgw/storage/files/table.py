"""The table: every file under --storage.path except the WAL, as Delta Lake tables (delta-rs) that
several writer processes commit to and any process reads a consistent snapshot of.

    table/samples/hour=<partition start, unix ms>/part-<writer>-<seq>.parquet   samples
    table/series/writer=<writer>/series-<writer>-<seq>.parquet                 the series table (sid, key)
    table/spans/writer=<writer>/spans-<writer>-<seq>.parquet                   each series' first/last sample time

One Delta table per kind (``kinds.KINDS``; a new kind is one entry). Not one table: the kinds have different
columns, and Delta has one schema per table. A Delta commit covers one table, so a flush commits the side
kinds first and the samples last, the samples commit carrying the writer's app transaction
``(writer id, WAL segment cut)``: that version says which WAL segments are covered. A crash between the
commits leaves series/spans files whose WAL segments are replayed and written again: registering a
known series and widening a span by the same samples change nothing.

We write the Parquet files ourselves (parquet_io: our sort order, encodings, row groups) and commit them
as add actions with stats (numRecords, min/max of every integer column: readers prune on t). Each writer
numbers its files from its own sequence (restarted above its highest file in the table or on disk), and
only ever removes its own files (compaction, retention): commits of different writers never touch the same
file, so a commit that lost the race for the next log entry is simply retried on the newer version.

Readers ``pin()`` a ``Snapshot`` (a local generation and the files of the tables at that point). A file
this writer removed is deleted by ``collect()`` once no local pin lists it AND ``vacuum_delay_s`` has
passed since its remove, for readers in other processes (their queries last at most --query.timeout).
At open, this writer's files on disk that the table does not list (written, never committed: a crash
mid-flush; or removed and not yet deleted when the process died) are collected the same way.
Other writers' commits join the snapshot at ``refresh()`` (the follower's step).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction as AppTransaction

from ...errors import Unavailable
from ...model import check_writer_id
from .fsync import fsync_dir
from .kinds import KINDS, SIDE_KINDS, file_seq, file_writer, parse_name
from .parquet_io import SampleFile

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 20  # a commit that loses the race for the next log entry is retried this often
# Delta writes a checkpoint every this many versions, so opening a table reads one checkpoint and fewer
# than this many JSON entries; log entries older than the retention are deleted at checkpoints.
TABLE_CONFIG = {"delta.checkpointInterval": "50", "delta.logRetentionDuration": "interval 1 days",
                "delta.enableExpiredLogCleanup": "true"}


@dataclass(frozen=True)
class Snapshot:
    """The files of one generation: what a reader may read until it releases its pin."""

    version: int  # local generation: grows at every change of the file lists
    samples: tuple[SampleFile, ...] = ()  # by (partition start, seq)
    series: tuple[str, ...] = ()  # by seq: write order
    spans: tuple[str, ...] = ()
    histograms: tuple[str, ...] = ()  # by seq
    exemplars: tuple[str, ...] = ()
    table_version: int = -1  # the samples table's Delta version this snapshot includes

    def paths(self) -> set[str]:
        return ({f.path for f in self.samples} | set(self.series) | set(self.spans) | set(self.histograms)
                | set(self.exemplars))

    def own(self, kind: str, writer: str) -> tuple[str, ...]:
        """Side files of ``kind`` this writer committed."""
        return tuple(p for p in getattr(self, kind) if file_writer(p) == writer)


class Pin:
    """A reader's hold on one snapshot; ``with pin as snap:`` releases it at the end (once)."""

    def __init__(self, owner: "Table", snap: Snapshot) -> None:
        self._owner = owner
        self.snapshot = snap
        self._held = True

    def __enter__(self) -> Snapshot:
        return self.snapshot

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        if self._held:
            self._held = False
            self._owner._unpin(self.snapshot.version)


class Table:
    def __init__(self, root: str, writer_id: str = "gw0", vacuum_delay_s: float = 0.0,
                 clock=time.monotonic) -> None:
        self.root = os.path.abspath(root)
        self.writer_id = check_writer_id(writer_id)
        self.vacuum_delay_s = vacuum_delay_s
        self._clock = clock
        self._lock = threading.Condition()
        self._commit_lock = threading.Lock()  # one commit of this process at a time
        self._tables: dict[str, DeltaTable] = {}
        self._seq = 0
        self._current = Snapshot(0)
        self._pins: Counter[int] = Counter()  # generation -> readers holding it
        self._retired: dict[str, tuple[int, float]] = {}  # path -> (first generation not listing it, when)
        self._failed_deletes: set[str] = set()  # logged once each
        self._closed = False

    def kind_root(self, kind: str) -> str:
        return os.path.join(self.root, "table", kind)

    # ------------------------------------------------------------------ open
    def open(self) -> int:
        """Open (or create) every kind's table, read its files, restart this writer's sequence above
        its files, and collect its files on disk that no table lists. Returns half-written files removed."""
        removed = 0
        for kind, spec in KINDS.items():
            path = self.kind_root(kind)
            if DeltaTable.is_deltatable(path):
                self._tables[kind] = DeltaTable(path)
            else:
                os.makedirs(path, exist_ok=True)
                try:
                    DeltaTable.create(path, spec.schema, mode="ignore", partition_by=[spec.partition],
                                      configuration=TABLE_CONFIG)
                except Exception:
                    if not DeltaTable.is_deltatable(path):  # not just another writer creating it first
                        raise
                self._tables[kind] = DeltaTable(path)
        snap = self._read_tables()
        listed = snap.paths()
        top = max((file_seq(p) for p in listed if file_writer(p) == self.writer_id), default=0)
        now = self._clock()
        for dirpath, _, files in os.walk(os.path.join(self.root, "table")):
            if os.path.basename(dirpath) == "_delta_log":
                continue
            for f in files:
                full = os.path.join(dirpath, f)
                if f.endswith(".tmp") and file_writer(f[:-4]) == self.writer_id:
                    os.remove(full)
                    removed += 1
                    continue
                parsed = parse_name(f)
                if parsed is None or parsed[1] != self.writer_id:
                    continue  # not ours: its writer collects it
                top = max(top, parsed[2])
                if full not in listed:  # never committed, or removed before a crash: other processes may read it
                    self._retired[full] = (0, now)
        with self._lock:
            self._seq = top
            self._current = snap
        return removed

    def _read_tables(self) -> Snapshot:
        """A snapshot of the tables as loaded now (every kind's add actions)."""
        lists: dict[str, list] = {}
        for kind, dt in self._tables.items():
            root = self.kind_root(kind)
            acts = pa.table(dt.get_add_actions(flatten=True))
            if not acts.num_rows:
                lists[kind] = []
                continue
            paths = [os.path.join(root, unquote(p)) for p in acts.column("path").to_pylist()]
            if kind == "samples":
                lists[kind] = sorted(
                    (SampleFile(p, int(h), file_seq(p), int(lo), int(hi), file_writer(p))
                     for p, h, lo, hi in zip(paths, acts.column("partition.hour").to_pylist(),
                                             acts.column("min.t").to_pylist(), acts.column("max.t").to_pylist())),
                    key=_sample_order)
            else:
                lists[kind] = sorted(paths, key=file_seq)
        with self._lock:
            gen = self._current.version + 1
        return Snapshot(gen, tuple(lists["samples"]), *(tuple(lists[k]) for k in SIDE_KINDS),
                        table_version=self._tables["samples"].version())

    # ------------------------------------------------------------------ readers
    @property
    def current(self) -> Snapshot:
        """The latest snapshot, unpinned: for the writer's planning, not for reading files."""
        return self._current

    def pin(self) -> Pin:
        """Hold the current snapshot: none of its files is deleted until the pin is released."""
        with self._lock:
            if self._closed:
                raise Unavailable("storage is shutting down")
            snap = self._current
            self._pins[snap.version] += 1
            return Pin(self, snap)

    def _unpin(self, version: int) -> None:
        with self._lock:
            self._pins[version] -= 1
            if self._pins[version] <= 0:
                del self._pins[version]
                self._lock.notify_all()

    @property
    def closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """No new pins from now on; wait for the readers holding one to finish."""
        with self._lock:
            self._closed = True
            self._lock.wait_for(lambda: not self._pins)

    def refresh(self) -> Snapshot | None:
        """Load commits of other processes; returns the previous snapshot when the file lists moved
        (so the caller sees what joined), None when nothing did."""
        with self._commit_lock:
            before = {k: dt.version() for k, dt in self._tables.items()}
            for dt in self._tables.values():
                dt.update_incremental()
            if all(dt.version() == before[k] for k, dt in self._tables.items()):
                return None
            return self._swap(self._read_tables(), set())

    def _swap(self, snap: Snapshot, removed: set[str]) -> Snapshot:
        with self._lock:
            old = self._current
            self._current = snap
            now = self._clock()
            for p in removed:
                self._retired[p] = (snap.version, now)
            return old

    def committed_wal_segment(self) -> int:
        """The WAL segment cut this writer's last flush commit covers (0: none)."""
        return self._tables["samples"].transaction_version(self.writer_id) or 0

    # ------------------------------------------------------------------ the writer
    def transaction(self) -> "Transaction":
        return Transaction(self)

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _commit(self, adds: dict[str, list[str]], retire: set[str], wal_cut: int | None) -> Snapshot:
        """Side kinds first, samples last (carrying the WAL cut): see the module docstring."""
        foreign = [p for p in retire if file_writer(p) != self.writer_id]
        if foreign:
            raise ValueError(f"removing files of another writer: {sorted(foreign)[:3]}")
        with self._commit_lock:
            live = self._current.paths()
            unknown = retire - live
            if unknown:
                raise ValueError(f"retiring files that are not in the table: {sorted(unknown)[:3]}")
            for kind in (*SIDE_KINDS, "samples"):
                root = self.kind_root(kind)
                mine = [p for p in retire if os.path.dirname(os.path.dirname(p)) == root]
                txn = wal_cut if kind == "samples" else None
                if adds[kind] or mine or txn is not None:
                    self._commit_one(kind, adds[kind], mine, txn)
            self._swap(self._read_tables(), retire)
            return self._current

    def _commit_one(self, kind: str, adds: list[str], removes: list[str], wal_cut: int | None) -> None:
        spec, dt, root = KINDS[kind], self._tables[kind], self.kind_root(kind)
        now_ms = int(time.time() * 1000)
        actions = [_add_action(root, p, spec.partition) for p in adds]
        actions += [RemoveAction(os.path.relpath(p, root), True, now_ms, None,
                                 {spec.partition: _partition_value(root, p)}) for p in removes]
        props = CommitProperties(app_transactions=[AppTransaction(self.writer_id, wal_cut)]) if wal_cut else None
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                dt.create_write_transaction(actions, "append", spec.schema, partition_by=[spec.partition],
                                            commit_properties=props)
                dt.update_incremental()
                return
            except CommitFailedError as err:  # another process took the next log entry: retry on the new version
                dt.update_incremental()
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise OSError(f"commit to table/{kind} failed {COMMIT_ATTEMPTS} times: {err}") from err
                listed = {os.path.join(root, unquote(p)) for p in pa.table(dt.get_add_actions()).column(
                    "path").to_pylist()}
                gone = [p for p in removes if p not in listed]
                if gone:  # only this writer removes its files: this cannot happen, say so rather than guess
                    raise OSError(f"files removed by someone else meanwhile: {gone[:3]}") from err

    def collect(self) -> int:
        """Delete removed files no pinned snapshot lists, once the vacuum delay has passed since their
        remove (and partition directories left empty). A file that cannot be deleted now is retried later."""
        now = self._clock()
        with self._lock:
            oldest = min(self._pins) if self._pins else None
            due = [p for p, (v, at) in self._retired.items()
                   if (oldest is None or oldest >= v) and now - at >= self.vacuum_delay_s]
        deleted = 0
        dirs: set[str] = set()
        for path in due:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                if path not in self._failed_deletes:
                    self._failed_deletes.add(path)
                    log.error("could not delete removed file %s (retried later): %s", path, err)
                continue
            self._failed_deletes.discard(path)
            with self._lock:
                del self._retired[path]
            deleted += 1
            dirs.add(os.path.dirname(path))
        for d in dirs:
            if os.path.basename(d).startswith("hour="):
                with contextlib.suppress(OSError):  # not empty (a live file) or already gone
                    os.rmdir(d)
        return deleted

    @property
    def retired(self) -> int:
        """Removed files not deleted yet (a running query holds them, the delay runs, or deleting failed)."""
        with self._lock:
            return len(self._retired)


class Transaction:
    """Files written for one commit, named from this writer's sequence; files written but not
    committed (the block raised, or ended without ``commit``) are deleted on exit."""

    def __init__(self, owner: Table) -> None:
        self._owner = owner
        self._adds: dict[str, list[str]] = {k: [] for k in KINDS}
        self._retire: set[str] = set()
        self._written: list[str] = []
        self._committed = False

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._committed:
            self._discard()

    def new_path(self, kind: str, partition_ms: int | None = None) -> tuple[str, int]:
        """A fresh (path, seq) for a file of ``kind``; its directory exists (and is durable)."""
        owner = self._owner
        seq = owner._next_seq()
        spec = KINDS[kind]
        part = f"hour={partition_ms}" if spec.partition == "hour" else f"writer={owner.writer_id}"
        d = os.path.join(owner.kind_root(kind), part)
        if not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
            fsync_dir(os.path.dirname(d))
        path = os.path.join(d, f"{spec.prefix}-{owner.writer_id}-{seq:08d}.parquet")
        if os.path.exists(path):  # the sequence restarts above every file of ours on disk; never overwrite data
            raise FileExistsError(f"{path} exists: the file sequence is behind the files on disk")
        self._written.append(path)
        return path, seq

    def add_samples(self, f: SampleFile) -> None:
        self._adds["samples"].append(f.path)

    def add_side(self, kind: str, path: str) -> None:
        self._adds[kind].append(path)

    def retire(self, paths) -> None:
        self._retire.update(paths)

    def commit(self, wal_cut: int | None = None) -> Snapshot:
        snap = self._owner._commit(self._adds, self._retire, wal_cut)
        self._committed = True
        return snap

    def _discard(self) -> None:
        for path in self._written:
            for p in (path, path + ".tmp"):
                try:
                    os.remove(p)
                except FileNotFoundError:
                    pass
                except OSError as err:  # not ours to raise over the failure that brought us here
                    log.error("could not delete %s of a failed commit (its samples are in the WAL or its inputs too; "
                              "reads resolve the duplicates): %s", p, err)


def _partition_value(root: str, path: str) -> str:
    return os.path.basename(os.path.dirname(path)).split("=", 1)[1]


def _add_action(root: str, path: str, partition: str) -> AddAction:
    """An add action with the stats readers prune on: rows, and min/max of every integer column."""
    st = os.stat(path)
    meta = pq.ParquetFile(path).metadata
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    for ci in range(meta.num_columns):
        name = meta.schema.column(ci).name
        if meta.schema.column(ci).physical_type != "INT64":
            continue
        stats = [meta.row_group(rg).column(ci).statistics for rg in range(meta.num_row_groups)]
        if stats and all(s is not None and s.has_min_max for s in stats):  # partial stats would mislead pruning
            lo[name] = min(s.min for s in stats)
            hi[name] = max(s.max for s in stats)
    stats = {"numRecords": meta.num_rows, "minValues": lo, "maxValues": hi, "nullCount": {k: 0 for k in lo}}
    return AddAction(os.path.relpath(path, root), st.st_size, {partition: _partition_value(root, path)},
                     int(st.st_mtime * 1000), True, json.dumps(stats))


def _sample_order(f: SampleFile) -> tuple[int, int]:
    return f.partition_ms, f.seq
