"""Merge the small files frequent flushes leave behind.

A closed partition (its hour is over and the head holds nothing of it) with several files, or any
partition with many, is rewritten as one file sorted by (metric, sid, t), keeping the first-written
sample of exact duplicates. DuckDB does the sort, spilling to disk within its memory limit, so a
partition bigger than memory still compacts. The new file is in place (tmp, fsync, rename) before
the old ones are retired (deleted once no query can still be reading them): a crash in between
leaves duplicates, which reads and the next compaction remove.
Side tables (series, spans) are merged the same way once they pile up.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict

from . import parquet_io
from .wal import fsync_dir

log = logging.getLogger(__name__)

MAX_FILES_OPEN_PARTITION = 16
MAX_SIDE_FILES = 16

_MERGE_SAMPLES = """
COPY (
  SELECT metric, sid, t, v FROM (
    SELECT DISTINCT ON (sid, t) metric, sid, t, v
    FROM read_parquet($files, filename = true)
    ORDER BY sid, t, filename
  )
  ORDER BY metric, sid, t
) TO '{out}' (FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION V2, ROW_GROUP_SIZE 131072)
"""


def _sql_path(path: str) -> str:
    return path.replace("'", "''")


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compact_partitions(storage) -> int:
    """Returns the number of partitions rewritten. Runs in the flush thread (one writer)."""
    by_part: dict[int, list[parquet_io.SampleFile]] = defaultdict(list)
    with storage._swap_lock:
        for f in storage.files:
            by_part[f.partition_ms].append(f)
        head_min = min([h.min_t for h in storage.flushing] + [storage.head.min_t])
    done = 0
    for part_ms, files in sorted(by_part.items()):
        closed = part_ms + storage.partition_ms <= head_min
        if len(files) < 2 or (not closed and len(files) < MAX_FILES_OPEN_PARTITION):
            continue
        storage._seq += 1
        out = os.path.join(os.path.dirname(files[0].path), f"part-{storage._seq:08d}.parquet")
        con = storage._db.cursor()
        try:
            con.execute(_MERGE_SAMPLES.format(out=_sql_path(out + ".tmp")), {"files": sorted(f.path for f in files)})
        finally:
            con.close()
        _fsync_file(out + ".tmp")
        os.replace(out + ".tmp", out)
        fsync_dir(os.path.dirname(out))
        merged = parquet_io.describe_sample_file(out, part_ms, storage._seq)
        old = {f.path for f in files}
        with storage._swap_lock:
            storage.files = sorted([f for f in storage.files if f.path not in old] + [merged],
                                   key=lambda f: (f.partition_ms, f.seq))
        storage.retire(old)  # deleted later: a running query may still be reading them
        done += 1
        log.info("compacted %d files of partition hour=%d into %s", len(files), part_ms, os.path.basename(out))
    return done


def compact_side_tables(storage) -> None:
    """Merge series-*.parquet and spans-*.parquet files once there are many."""
    _merge_dir(storage, "series", "series", "SELECT DISTINCT ON (sid) sid, labels FROM read_parquet($files)")
    _merge_dir(storage, "spans", "spans",
               "SELECT sid, min(min_t) AS min_t, max(max_t) AS max_t FROM read_parquet($files) GROUP BY sid")


def _merge_dir(storage, sub: str, prefix: str, select: str) -> None:
    d = os.path.join(storage.path, sub)
    if not os.path.isdir(d):
        return
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith(prefix) and f.endswith(".parquet"))
    if len(files) < MAX_SIDE_FILES:
        return
    storage._seq += 1
    out = os.path.join(d, f"{prefix}-{storage._seq:08d}.parquet")
    con = storage._db.cursor()
    try:
        con.execute(f"COPY ({select}) TO '{_sql_path(out + '.tmp')}' (FORMAT parquet, COMPRESSION zstd)", {"files": files})
    finally:
        con.close()
    _fsync_file(out + ".tmp")
    os.replace(out + ".tmp", out)
    fsync_dir(d)
    for f in files:
        os.remove(f)
    fsync_dir(d)
