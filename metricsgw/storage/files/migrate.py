"""One-time migration of a data directory written before the table (storage/files/table.py) existed:

    samples/hour=<ms>/part-<seq>.parquet, series/series-<seq>.parquet, spans/spans-<seq>.parquet,
    flushed.json (the WAL segment the files cover), metadata.json, catalog.npz.zst, wal/<seq>.wal

become files of this writer's in the table (hard links named ``<prefix>-<writer>-<seq>``: the sequence
numbers stay, so the catalog checkpoint's ``covered_seq`` stays true), committed with ``flushed.json``'s
segment as the writer's app transaction; then the WAL, metadata and checkpoint move to
``wal/<writer id>/`` and the old names go, ``flushed.json`` last.

Every step can be repeated, and a start that finds any old name runs them all again: a crash at any
point (crash points ``migrate.*``) loses nothing and commits nothing twice (files the table already
lists are not added again).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil

from .. import crashpoints
from ..wal.wal import list_segments, segment_name
from . import parquet_io
from .fsync import fsync_dir
from .kinds import KINDS, SIDE_KINDS
from .table import Table

log = logging.getLogger(__name__)

_OLD_NAME = re.compile(r"^(part|series|spans)-(\d+)\.parquet$")
_MOVED = ("metadata.json", "catalog.npz.zst")


def old_layout(root: str, writer_id: str, writer_dir: str) -> bool:
    """Migrate ``root`` if it holds the old layout; True if it did."""
    old = _old_files(root)
    marker = os.path.join(root, "flushed.json")
    old_wal = os.path.join(root, "wal")
    segments = list_segments(old_wal) if os.path.isdir(old_wal) else []
    moved = [n for n in _MOVED if os.path.exists(os.path.join(root, n))]
    if not (old or os.path.exists(marker) or segments or moved):
        return False
    log.warning("migrating %s to the table layout (%d files, %d WAL segments) as writer %s",
                root, sum(len(v) for v in old.values()), len(segments), writer_id)
    table = Table(root, writer_id)
    table.open()
    linked = _link(table, old)
    crashpoints.reached("migrate.linked")
    listed = table.current.paths()
    cut = _read_marker(marker)
    with table.transaction() as tx:
        for kind, paths in linked.items():
            for new in paths:
                if new in listed:
                    continue
                if kind == "samples":
                    tx.add_samples(parquet_io.describe_sample_file(new, _partition(new), 0, writer_id))
                else:
                    tx.add_side(kind, new)
        tx.commit(wal_cut=cut or None)
    crashpoints.reached("migrate.committed")
    for seg in segments:
        os.replace(os.path.join(old_wal, segment_name(seg)), os.path.join(writer_dir, segment_name(seg)))
    for name in moved:
        os.replace(os.path.join(root, name), os.path.join(writer_dir, name))
    fsync_dir(writer_dir)
    fsync_dir(old_wal)
    crashpoints.reached("migrate.moved")
    for kind in KINDS:
        for path in old.get(kind, ()):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(os.path.join(root, kind))  # what is left: empty partitions, .tmp files
    fsync_dir(root)
    with contextlib.suppress(FileNotFoundError):
        os.remove(marker)
    fsync_dir(root)
    log.warning("migration of %s done", root)
    return True


def _old_files(root: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    sroot = os.path.join(root, "samples")
    for dirpath, _, files in os.walk(sroot):
        out.setdefault("samples", []).extend(os.path.join(dirpath, f) for f in sorted(files) if _OLD_NAME.match(f))
    for kind in SIDE_KINDS:
        d = os.path.join(root, kind)
        if os.path.isdir(d):
            out[kind] = [os.path.join(d, f) for f in sorted(os.listdir(d)) if _OLD_NAME.match(f)]
    return {k: v for k, v in out.items() if v}


def _link(table: Table, old: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each old file under its table name (a hard link: no copy, the old name goes later)."""
    out: dict[str, list[str]] = {}
    for kind, paths in old.items():
        spec = KINDS[kind]
        for path in paths:
            seq = int(_OLD_NAME.match(os.path.basename(path)).group(2))
            part = os.path.basename(os.path.dirname(path)) if spec.partition == "hour" else f"writer={table.writer_id}"
            d = os.path.join(table.kind_root(kind), part)
            os.makedirs(d, exist_ok=True)
            new = os.path.join(d, f"{spec.prefix}-{table.writer_id}-{seq:08d}.parquet")
            if not os.path.exists(new):
                os.link(path, new)
            out.setdefault(kind, []).append(new)
        for d in {os.path.dirname(p) for p in out.get(kind, ())}:
            fsync_dir(d)
    return out


def _partition(path: str) -> int:
    return int(os.path.basename(os.path.dirname(path)).split("=", 1)[1])


def _read_marker(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return int(json.load(fh)["wal_segment"])
    except FileNotFoundError:
        return 0
