"""One commit being prepared: the files it writes (named from this writer's sequence), the files it retires, and
its ``commit``; what it wrote and did not commit is deleted on exit, so a failed flush or merge leaves no file.

Apart from table.py because it is the writer's side only (flush, compaction, retention, migration): a reader never
meets it. It asks the table for a sequence number and for the commit, through the table's public methods.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from .fsync import fsync_dir
from .kinds import KINDS
from .parquet_io import SampleFile
from .snapshot import Snapshot

if TYPE_CHECKING:
    from .table import Table

log = logging.getLogger(__name__)


class Transaction:
    """Files written for one commit, named from this writer's sequence; files written but not
    committed (the block raised, or ended without ``commit``) are deleted on exit."""

    def __init__(self, owner: "Table") -> None:
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
        seq = owner.next_seq()
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
        snap = self._owner.commit_files(self._adds, self._retire, wal_cut)
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
