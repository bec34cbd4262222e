"""WALs this gateway wrote under another layout, flushed into the table before the children start.

A gateway's writers are ``--storage.writer-id`` itself (``--server.single-process``, or one ingest shard) and
``<writer id>-s<i>`` (shard i of several). When the layout changes (the default became several shards, the
machine got fewer cores, ``--ingest.shards`` was lowered, or a single process is replaced by the front),
a writer of the old layout that was not stopped cleanly (kill -9, power loss) still holds acknowledged
samples in its WAL, and no child of the new layout would ever replay it. The front replays each such WAL
once, as that writer, and flushes it into the table (where every query process reads it), before any child
starts. Another gateway's writers (other ids) are never touched; a writer id a live process holds stops the
start (``WriterIdInUse``), as a second gateway on one writer id is refused.
"""

from __future__ import annotations

import logging
import os
import re

from ..config import Config
from ..limits.memory import MemoryShares
from ..storage.wal.wal import list_segments, segment_name
from .layout import Layout, shard_writer_id

log = logging.getLogger(__name__)


def orphaned_writers(cfg: Config, layout: Layout) -> list[str]:
    """This gateway's writer ids, other than its shards', whose WAL holds records."""
    wal_root = os.path.join(cfg.storage_path, "wal")
    ours = re.compile(rf"^{re.escape(cfg.storage_writer_id)}(-s\d+)?$")
    current = {shard_writer_id(cfg.storage_writer_id, c.index, layout.shards) for c in layout.shard_children}
    try:
        names = sorted(os.listdir(wal_root))
    except FileNotFoundError:
        return []
    return [n for n in names if ours.match(n) and n not in current and _has_records(os.path.join(wal_root, n))]


def _has_records(wal_dir: str) -> bool:
    return any(os.path.getsize(os.path.join(wal_dir, segment_name(seg))) > 0 for seg in list_segments(wal_dir))


def flush_orphans(cfg: Config, layout: Layout) -> list[str]:
    """Replay and flush every orphaned WAL (blocking; before the children start). Returns the writer ids."""
    writers = orphaned_writers(cfg, layout)
    if writers:  # (only then: importing the storage is most of a second the children would start later)
        from ..app import storage_for  # the one place a Storage is built from the settings
    for writer in writers:
        log.warning("the WAL of writer %s (a layout this gateway ran before) holds samples no shard replays; "
                    "flushing it into the table first", writer)
        storage = storage_for(Config({**cfg.values, "storage_follow_others": False}), MemoryShares.of(cfg.query_max_memory),
                              writer_id=writer)
        storage.open()
        storage.close(flush=True)
    return writers
