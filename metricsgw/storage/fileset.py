"""The file set: every file under --storage.path except the WAL, its names, its versions, its readers.

    samples/hour=<partition start, unix ms>/part-<seq>.parquet   samples (flushes, partition compaction)
    series/series-<seq>.parquet                                   the series table (sid, labels)
    spans/spans-<seq>.parquet                                     each series' first and last sample time
    histograms/hist-<seq>.parquet                                 native histogram samples (storage/native_files.py)
    exemplars/exemplars-<seq>.parquet                             exemplars

Every kind takes its number from ONE sequence, restarted at open above the highest number of every
kind found on disk, so a new file is never named like a live one. (Before, start-up left spans
numbers out; side-table compaction then named its output like its newest input, overwrote it and
deleted it with the other inputs: every time span was lost and PromQL saw no series.)

One writer (the flusher thread) changes the set, always by a commit: the files a ``Transaction``
wrote are added and the files it retires leave, together, as a new version. Readers ``pin()`` a
``Snapshot`` (a version and its files) for as long as they read them. A retired file is deleted by
``collect()`` (the writer again) once no snapshot from before its retirement is pinned -- however
long a query runs, and no longer. Files a transaction wrote but never committed (a failed flush or
compaction) are deleted when it ends, so a failure leaves no stray file behind.

How this maps onto a table format's log (Delta Lake, issue 10), should one take this role later:
  - ``Snapshot.version``         the table version (the number of the last ``_delta_log`` entry)
  - ``Snapshot``'s files         the add actions live at that version (``DeltaTable(p, version=v).file_uris()``)
  - ``Transaction.commit()``     one log entry holding add and remove actions (an atomic put-if-absent
                                 of the next entry; losing that race means re-planning, as compaction would)
  - ``pin()`` / release          a reader holding a version; ``collect()`` is vacuum, with "no reader
                                 still holds a version older than the remove" instead of a fixed period
  - ``open()``'s directory scan  reading the log (last checkpoint + later entries); a file on disk but
                                 not in the log is what vacuum deletes, as ``Transaction`` does here
  - the sequence                 file naming only: Delta names data files by UUID, so it falls away
  - series, spans                tables of their own in the same log (a commit here may touch both)
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass

from ..errors import Unavailable
from . import parquet_io
from .parquet_io import SampleFile
from .wal import fsync_dir

log = logging.getLogger(__name__)

SIDE_KINDS = ("series", "spans", "histograms", "exemplars")
_PREFIX = {"samples": "part", "series": "series", "spans": "spans", "histograms": "hist", "exemplars": "exemplars"}
_NAME_RE = re.compile(r"^(part|series|spans|hist|exemplars)-(\d+)\.parquet$")
_PARTITION_RE = re.compile(r"^hour=(-?\d+)$")


@dataclass(frozen=True)
class Snapshot:
    """The files of one version: what a reader may read until it releases its pin."""

    version: int
    samples: tuple[SampleFile, ...] = ()  # by (partition start, seq)
    series: tuple[str, ...] = ()  # by seq: write order
    spans: tuple[str, ...] = ()
    histograms: tuple[str, ...] = ()  # by seq: write order (a kind of its own: a table in Delta terms)
    exemplars: tuple[str, ...] = ()

    def paths(self) -> set[str]:
        return ({f.path for f in self.samples} | set(self.series) | set(self.spans) | set(self.histograms)
                | set(self.exemplars))


class Pin:
    """A reader's hold on one snapshot; ``with pin as snap:`` releases it at the end (once)."""

    def __init__(self, owner: "FileSet", snap: Snapshot) -> None:
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


class FileSet:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self._lock = threading.Condition()
        self._seq = 0
        self._current = Snapshot(0)
        self._pins: Counter[int] = Counter()  # version -> readers holding it
        self._retired: dict[str, int] = {}  # path -> the version that no longer lists it
        self._failed_deletes: set[str] = set()  # logged once each
        self._closed = False

    # ------------------------------------------------------------------ open
    def open(self) -> int:
        """Delete half-written files, list every file, restart the sequence above all of them.
        Returns the number of half-written files removed."""
        removed = self._remove_temporaries()
        samples: list[SampleFile] = []
        side: dict[str, list[tuple[int, str]]] = {k: [] for k in SIDE_KINDS}
        top = 0
        sroot = os.path.join(self.root, "samples")
        for pname in sorted(os.listdir(sroot)) if os.path.isdir(sroot) else ():
            pm = _PARTITION_RE.match(pname)
            if not pm:
                continue
            for fname in os.listdir(os.path.join(sroot, pname)):
                fm = _NAME_RE.match(fname)
                if fm:
                    seq = int(fm.group(2))
                    top = max(top, seq)
                    if fm.group(1) == _PREFIX["samples"]:
                        samples.append(parquet_io.describe_sample_file(os.path.join(sroot, pname, fname),
                                                                       int(pm.group(1)), seq))
        for kind in SIDE_KINDS:
            d = os.path.join(self.root, kind)
            for fname in os.listdir(d) if os.path.isdir(d) else ():
                fm = _NAME_RE.match(fname)
                if fm:
                    seq = int(fm.group(2))
                    top = max(top, seq)
                    if fm.group(1) == _PREFIX[kind]:
                        side[kind].append((seq, os.path.join(d, fname)))
        with self._lock:
            self._seq = top
            self._current = Snapshot(self._current.version + 1, tuple(sorted(samples, key=_sample_order)),
                                     *(tuple(p for _, p in sorted(side[k])) for k in SIDE_KINDS))
        return removed

    def _remove_temporaries(self) -> int:
        """``.tmp`` files a crash left mid-write (the WAL's directory is not ours)."""
        removed = 0
        for dirpath, dirnames, files in os.walk(self.root):
            if dirpath == self.root and "wal" in dirnames:
                dirnames.remove("wal")
            for f in files:
                if f.endswith(".tmp"):
                    os.remove(os.path.join(dirpath, f))
                    removed += 1
        return removed

    # ------------------------------------------------------------------ readers
    @property
    def current(self) -> Snapshot:
        """The latest version, unpinned: for the writer's planning, not for reading files."""
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

    # ------------------------------------------------------------------ the writer
    def transaction(self) -> "Transaction":
        return Transaction(self)

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _commit(self, samples: list[SampleFile], side: dict[str, list[str]], retire: set[str]) -> Snapshot:
        with self._lock:
            cur = self._current
            unknown = retire - cur.paths()
            if unknown:
                raise ValueError(f"retiring files that are not in the set: {sorted(unknown)[:3]}")
            snap = Snapshot(
                cur.version + 1,
                tuple(sorted([f for f in cur.samples if f.path not in retire] + samples, key=_sample_order)),
                *(tuple([p for p in getattr(cur, k) if p not in retire] + side[k]) for k in SIDE_KINDS))
            self._current = snap
            for p in retire:
                self._retired[p] = snap.version
            return snap

    def collect(self) -> int:
        """Delete retired files no pinned snapshot lists (and partition directories left empty).
        Runs in the writer's thread. A file that cannot be deleted now is retried at the next call."""
        with self._lock:
            oldest = min(self._pins) if self._pins else None
            due = [p for p, v in self._retired.items() if oldest is None or oldest >= v]
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
                    log.error("could not delete retired file %s (retried later): %s", path, err)
                continue
            self._failed_deletes.discard(path)
            with self._lock:
                del self._retired[path]
            deleted += 1
            dirs.add(os.path.dirname(path))
        for d in dirs:
            if _PARTITION_RE.match(os.path.basename(d)):
                with contextlib.suppress(OSError):  # not empty (a live file) or already gone
                    os.rmdir(d)
        return deleted

    @property
    def retired(self) -> int:
        """Retired files not deleted yet (a running query holds them, or deleting failed)."""
        with self._lock:
            return len(self._retired)


class Transaction:
    """Files written for one commit. Names come from the set's sequence; files written but not
    committed (the block raised, or ended without ``commit``) are deleted on exit."""

    def __init__(self, owner: FileSet) -> None:
        self._owner = owner
        self._samples: list[SampleFile] = []
        self._side: dict[str, list[str]] = {k: [] for k in SIDE_KINDS}
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
        seq = self._owner._next_seq()
        if kind == "samples":
            d = os.path.join(self._owner.root, "samples", f"hour={partition_ms}")
        else:
            d = os.path.join(self._owner.root, kind)
        if not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
            fsync_dir(os.path.dirname(d))
        path = os.path.join(d, f"{_PREFIX[kind]}-{seq:08d}.parquet")
        if os.path.exists(path):  # the one-sequence rule makes this impossible; never overwrite data
            raise FileExistsError(f"{path} exists: the file sequence is behind the files on disk")
        self._written.append(path)
        return path, seq

    def add_samples(self, f: SampleFile) -> None:
        self._samples.append(f)

    def add_side(self, kind: str, path: str) -> None:
        self._side[kind].append(path)

    def retire(self, paths) -> None:
        self._retire.update(paths)

    def commit(self) -> Snapshot:
        snap = self._owner._commit(self._samples, self._side, self._retire)
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


def _sample_order(f: SampleFile) -> tuple[int, int]:
    return f.partition_ms, f.seq
