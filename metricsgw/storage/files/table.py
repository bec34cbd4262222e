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

On an object store (``store``, --storage.table-url) the Delta logs and every committed file are in the store, and
the directory under --storage.path holds a copy of every file the snapshot lists: a commit uploads its files before
committing them, and a snapshot is swapped in only once every file it lists is here (fetched from the store). So
every reader (DuckDB's own Parquet reader, compaction, the catalog) reads local files, as without a store; a store
that cannot be reached leaves the last snapshot readable, and the next refresh fetches what it missed. With a byte
budget (``store.cache_bytes``) other writers' sample files are the exception: a query fetches those its plan needs
through ``local_paths`` (copies.py). A file another writer removed is deleted here as this writer's own removed
files are (after the pins and the vacuum delay); in the store only its writer deletes it, the vacuum delay after its
remove, which gateways on other hosts get as their grace to fetch it if they are about to (bench/object_store.py
measures this read path against the others). Each process claims its writer id in the store (object_store.py).

Beside it: snapshot.py (``Snapshot`` and ``Pin``, what a reader holds), transaction.py (``Transaction``, the files
one commit writes and retires) and delta_log.py (the Delta log through delta-rs: listing a table's files, committing
add and remove actions with retries).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from deltalake import DeltaTable

from ...errors import Unavailable
from ...model import check_writer_id
from .copies import Copies
from .delta_log import commit_actions, listed_files
from .kinds import KINDS, SIDE_KINDS, file_seq, file_writer, parse_name
from .object_store import CLAIM_STALE_S, ObjectStore, StoreRefused, StoreUnavailable
from .parquet_io import SampleFile
from .snapshot import Pin, Snapshot
from .transaction import Transaction

# Readers and writers import these from here, where the table that makes them is.
__all__ = ["Pin", "SampleFile", "Snapshot", "Table", "Transaction", "file_writer"]

log = logging.getLogger(__name__)

# Delta writes a checkpoint every this many versions, so opening a table reads one checkpoint and fewer
# than this many JSON entries; log entries older than the retention are deleted at checkpoints.
TABLE_CONFIG = {"delta.checkpointInterval": "50", "delta.logRetentionDuration": "interval 1 days",
                "delta.enableExpiredLogCleanup": "true"}
# A file fetched as its writer deletes it (the vacuum delay after its remove, which a newer log entry holds) is a
# refresh that read the log just before the remove: reading the log again drops the file.
FETCH_ATTEMPTS = 3
STORE_THREADS = 8  # files sent to or fetched from the object store at once (each waits on the network, not the CPU)


class Table:
    def __init__(self, root: str, writer_id: str = "gw0", vacuum_delay_s: float = 0.0,
                 clock=time.monotonic, store: ObjectStore | None = None) -> None:
        self.root = os.path.abspath(root)
        self.store = store
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
        self._stale = False  # the Delta tables moved past the snapshot, whose files could not all be fetched
        self._claim_renewed = clock()  # when this writer id's claim in the store was last renewed (tried)
        self._lost_claim: StoreRefused | None = None  # another gateway took this writer id: no more commits
        # with a byte budget, other writers' sample files are fetched when a read needs them (copies.py)
        self.copies = (Copies(store, self.root, self.writer_id, store.cache_bytes, STORE_THREADS)
                       if store is not None and store.cache_bytes else None)

    def kind_root(self, kind: str) -> str:
        return os.path.join(self.root, "table", kind)

    def _rel(self, path: str) -> str:
        """A file's name in the object store: its path under --storage.path."""
        return os.path.relpath(path, self.root)

    def _open_delta(self, kind: str) -> DeltaTable:
        path = self.kind_root(kind)
        url, opts = (self.store.delta_url(self._rel(path)), self.store.delta_options) if self.store else (path, None)
        if not DeltaTable.is_deltatable(url, storage_options=opts):
            os.makedirs(path, exist_ok=True)
            spec = KINDS[kind]
            try:
                DeltaTable.create(url, spec.schema, mode="ignore", partition_by=[spec.partition],
                                  configuration=TABLE_CONFIG, storage_options=opts)
            except Exception:
                if not DeltaTable.is_deltatable(url, storage_options=opts):  # not another writer creating it first
                    raise
        return DeltaTable(url, storage_options=opts)

    @contextlib.contextmanager
    def _store_calls(self, what: str):
        """delta-rs's failures to reach the store, in the store's plain words (a 503 for a query)."""
        try:
            yield
        except (StoreUnavailable, FileNotFoundError):  # already plain; a file removed meanwhile is the caller's
            raise
        except Exception as err:  # noqa: BLE001 - delta-rs raises OSError and its own kinds for a store it cannot use
            if self.store is None:
                raise
            raise self.store.plain(what, err) from None

    # ------------------------------------------------------------------ open
    def open(self) -> int:
        """Open (or create) every kind's table, read its files, restart this writer's sequence above
        its files, and collect its files on disk (and in the store) that no table lists. Returns
        half-written files removed. On a store, first prove that it keeps concurrent commits apart."""
        removed = 0
        if self.store is not None:
            self.store.check_conditional_writes()
            self.store.claim_writer(self.writer_id, f"{socket.gethostname()}:{self.root}")
        if self.copies is not None:
            self.copies.open()
        with self._store_calls("open the table in"):
            for kind in KINDS:
                self._tables[kind] = self._open_delta(kind)
        snap = self._read_tables()
        listed = snap.paths()
        top = max((file_seq(p) for p in listed if file_writer(p) == self.writer_id), default=0)
        now = self._clock()
        if self.store is not None:  # uploaded, never committed (a crash or a failed commit): ours to delete
            for rel in self.store.list("table/"):
                parsed = parse_name(rel)
                full = os.path.join(self.root, rel)
                if parsed is not None and parsed[1] == self.writer_id and "_delta_log" not in rel:
                    top = max(top, parsed[2])
                    if full not in listed:
                        self._retired[full] = (0, now)
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
        """A snapshot of the tables as loaded now (every kind's add actions), every file of it on local disk."""
        lists = {kind: listed_files(dt, kind, self.kind_root(kind)) for kind, dt in self._tables.items()}
        with self._lock:
            gen = self._current.version + 1
        snap = Snapshot(gen, tuple(lists["samples"]), *(tuple(lists[k]) for k in SIDE_KINDS),
                        table_version=self._tables["samples"].version())
        if self.store is not None:
            self._stale = True  # until every file is here: the next refresh reads the tables again
            self._on_store(lambda p, rel: self.store.get(rel, p),
                           [p for p in snap.paths() if not os.path.exists(p) and not self._on_demand(p)])
            self._stale = False
        return snap

    def _on_demand(self, path: str) -> bool:
        """Whether ``path`` is fetched when a read needs it (``local_paths``) rather than with its snapshot."""
        return (self.copies is not None and file_writer(path) != self.writer_id
                and path.startswith(self.kind_root("samples") + os.sep))

    @contextlib.contextmanager
    def local_paths(self, paths: list[str]):
        """Where a read of these sample files of a pinned snapshot finds them, until the block ends: the paths
        themselves, or the copies fetched for it (copies.py)."""
        if not any(map(self._on_demand, paths)):
            yield paths
            return
        with self.copies.reading([p for p in paths if self._on_demand(p)]):
            yield [self.copies.copy_of(p) if self._on_demand(p) else p for p in paths]

    def _on_store(self, call, paths: list[str]) -> None:
        """``call(path, its name in the store)`` for every path, several at once (each waits on the network)."""
        with ThreadPoolExecutor(STORE_THREADS) as pool:
            list(pool.map(lambda p: call(p, self._rel(p)), paths))

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
            return Pin(snap, self._unpin)

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
        if self.store is not None and self._lost_claim is None:
            self.store.release_claim()

    def refresh(self) -> Snapshot | None:
        """Load commits of other processes; returns the previous snapshot when the file lists moved
        (so the caller sees what joined), None when nothing did."""
        with self._commit_lock, self._store_calls("read"):
            before = {k: dt.version() for k, dt in self._tables.items()}
            for dt in self._tables.values():
                dt.update_incremental()
            if not self._stale and all(dt.version() == before[k] for k, dt in self._tables.items()):
                return None
            return self._swap(self._read_latest(), set())

    def _read_latest(self) -> Snapshot:
        """``_read_tables``; when a file it lists was deleted before it could be fetched (its writer's remove is in
        a newer log entry), the logs are read again, which drop it."""
        for _ in range(FETCH_ATTEMPTS - 1):
            try:
                return self._read_tables()
            except FileNotFoundError:
                for dt in self._tables.values():
                    dt.update_incremental()
        try:
            return self._read_tables()
        except FileNotFoundError:
            raise StoreUnavailable("files the table lists keep disappearing from the object store before they can "
                                   "be fetched; retry") from None

    def _swap(self, snap: Snapshot, removed: set[str]) -> Snapshot:
        """``snap`` becomes current; ``removed`` (and, on a store, the copies here of files other writers removed)
        are deleted once no pin lists them and the vacuum delay has passed."""
        with self._lock:
            old = self._current
            if self.store is not None:
                removed = removed | {p for p in old.paths() - snap.paths() if file_writer(p) != self.writer_id}
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

    def next_seq(self) -> int:
        """The next number of this writer's file sequence (a transaction names its files with it)."""
        with self._lock:
            self._seq += 1
            return self._seq

    def commit_files(self, adds: dict[str, list[str]], retire: set[str], wal_cut: int | None) -> Snapshot:
        """A transaction's commit (``Transaction.commit``): side kinds first, samples last (carrying the WAL cut),
        see the module docstring."""
        if self._lost_claim is not None:
            raise OSError(str(self._lost_claim))
        foreign = [p for p in retire if file_writer(p) != self.writer_id]
        if foreign:
            raise ValueError(f"removing files of another writer: {sorted(foreign)[:3]}")
        with self._commit_lock, self._store_calls("commit to"):
            live = self._current.paths()
            unknown = retire - live
            if unknown:
                raise ValueError(f"retiring files that are not in the table: {sorted(unknown)[:3]}")
            if self.store is not None:  # every file in the store before a commit names it
                self._on_store(self.store.put, [p for paths in adds.values() for p in paths])
            for kind in (*SIDE_KINDS, "samples"):
                root = self.kind_root(kind)
                mine = [p for p in retire if os.path.dirname(os.path.dirname(p)) == root]
                txn = wal_cut if kind == "samples" else None
                if adds[kind] or mine or txn is not None:
                    self._commit_one(kind, adds[kind], mine, txn)
            self._swap(self._read_latest(), retire)
            return self._current

    def _commit_one(self, kind: str, adds: list[str], removes: list[str], wal_cut: int | None) -> None:
        commit_actions(self._tables[kind], kind, self.kind_root(kind), adds, removes, self.writer_id, wal_cut)

    def collect(self) -> int:
        """Delete removed files no pinned snapshot lists, once the vacuum delay has passed since their
        remove (and partition directories left empty). A file that cannot be deleted now is retried later.
        On a store, the flusher's loop calling this every second also renews the writer id's claim."""
        now = self._clock()
        if self.store is not None and self._lost_claim is None and now - self._claim_renewed >= CLAIM_STALE_S / 4:
            self._renew_claim(now)
        with self._lock:
            oldest = min(self._pins) if self._pins else None
            due = [p for p, (v, at) in self._retired.items()
                   if (oldest is None or oldest >= v) and now - at >= self.vacuum_delay_s]
        deleted = 0
        dirs: set[str] = set()
        for path in due:
            try:
                if self.store is not None and file_writer(path) == self.writer_id:
                    self.store.delete(self._rel(path))
                os.remove(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                if path not in self._failed_deletes:
                    self._failed_deletes.add(path)
                    log.error("could not delete removed file %s (retried later): %s", path, err)
                continue
            self._failed_deletes.discard(path)
            if self.copies is not None:
                self.copies.forget([path])
            with self._lock:
                del self._retired[path]
            deleted += 1
            dirs.add(os.path.dirname(path))
        for d in dirs:
            if os.path.basename(d).startswith("hour="):
                with contextlib.suppress(OSError):  # not empty (a live file) or already gone
                    os.rmdir(d)
        return deleted

    def _renew_claim(self, now: float) -> None:
        """The claim on this writer id (object_store.py), renewed by the flusher's loop through ``collect``."""
        self._claim_renewed = now
        try:
            self.store.renew_claim()
        except StoreRefused as err:
            self._lost_claim = err
            log.error("%s", err)
        except StoreUnavailable as err:  # tried again a quarter of the stale time later
            log.warning("could not renew this writer id's claim: %s", err)

    @property
    def retired(self) -> int:
        """Removed files not deleted yet (a running query holds them, the delay runs, or deleting failed)."""
        with self._lock:
            return len(self._retired)
