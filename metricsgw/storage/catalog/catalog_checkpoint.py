"""The in-memory series table saved as it is (numpy columns + distinct label values), so start-up
loads arrays instead of parsing a million series keys.

``wal/<writer id>/catalog.npz.zst`` (numpy's npz through zstd, written atomically after a flush) holds every
column of the Catalog and of its metric tables, and ``covered_seq``: every series and spans file this writer
committed to the table (table.py) with a sequence number up to it is in the checkpoint; start-up adds only the
files listed after it (and the WAL). It also holds ``forgotten_until``: the series the head window had forgotten
(in the files it covers, not in it) have no sample after it, so a restart's reads ask the archive for older times
as before. Retention dropping series discards the checkpoint (they must not come back at a restart); the next
flush writes a new one. A checkpoint may also hold series newer than that (added since the WAL cut, or taken
between flushes): they come back from the WAL anyway, registering a known series is a no-op, and replay hands
every series its records bring to the next flush's series file (startup.py). A missing or unreadable checkpoint just means
the slower full load (keysplit.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import zipfile

import numpy as np
import zstandard

from ..files.fsync import fsync_dir
from ..files.kinds import file_seq
from .catalog import Catalog
from .metric_table import Column, MetricTable

log = logging.getLogger(__name__)

NAME = "catalog.npz.zst"
ZSTD_LEVEL = 3
_VERSION = 1


def snapshot(catalog: Catalog) -> dict:
    """A consistent copy of the catalog's columns (take it where no series is being added)."""
    n = len(catalog)
    tables, gidx, columns, codes = [], [], [], []
    for t in catalog.tables:
        tables.append(t.name)
        rows = len(t)
        gidx.append(t.gidx.view[:rows].copy())
        for name, col in t.columns.items():
            columns.append([t.index, name, list(col.values)])
            c = col.codes.view[:rows]
            codes.append(np.concatenate([c, np.zeros(rows - len(c), np.int32)]) if len(c) < rows else c.copy())
    return {"sids": catalog.sids.view[:n].copy(), "first_ms": catalog.first_ms.view[:n].copy(),
            "last_ms": catalog.last_ms.view[:n].copy(), "metric_idx": catalog.metric_idx.view[:n].copy(),
            "tables": tables, "gidx": gidx, "columns": columns, "codes": codes}


def covered_seq(files, writer: str) -> int:
    """The highest sequence number among a table snapshot's series and spans files of ``writer``."""
    return max((file_seq(p) for p in (*files.own("series", writer), *files.own("spans", writer))), default=0)


def discard(root: str) -> None:
    """Remove the checkpoint (it holds series retention has dropped); start-up then reads the series files."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(root, NAME))
        fsync_dir(root)


def save(root: str, snap: dict, covered_seq: int) -> None:
    strings = json.dumps({"version": _VERSION, "covered_seq": covered_seq, "tables": snap["tables"],
                          "columns": snap["columns"], "forgotten_until": snap.get("forgotten_until")},
                         ensure_ascii=False).encode("utf-8", "surrogatepass")
    empty64 = np.empty(0, np.int64)
    # the sids' order too (sorted outside the lock the snapshot was taken under): a restart's lookups need it
    order = np.argsort(snap["sids"], kind="stable").astype(np.int32 if len(snap["sids"]) < 2**31 else np.int64)
    arrays = {"sids": snap["sids"], "order": order, "first_ms": snap["first_ms"], "last_ms": snap["last_ms"],
              "metric_idx": snap["metric_idx"],
              "gidx": np.concatenate(snap["gidx"]) if snap["gidx"] else empty64,
              "gidx_len": np.array([len(g) for g in snap["gidx"]], np.int64),
              "codes": np.concatenate(snap["codes"]) if snap["codes"] else np.empty(0, np.int32),
              "codes_len": np.array([len(c) for c in snap["codes"]], np.int64),
              "strings": np.frombuffer(strings, np.uint8)}
    path = os.path.join(root, NAME)
    tmp = path + ".tmp"
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    try:
        with open(tmp, "wb") as fh:
            fh.write(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(buf.getbuffer()))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(root)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def load(root: str) -> tuple[Catalog, int, int] | None:
    """(the catalog, covered_seq, forgotten_until), or None if there is no usable checkpoint."""
    path = os.path.join(root, NAME)
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as fh:
            raw = zstandard.ZstdDecompressor().decompress(fh.read())
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays["strings"].tobytes().decode("utf-8", "surrogatepass"))
        if meta["version"] != _VERSION:
            return None
        forgotten = meta.get("forgotten_until")  # absent before the head window: nothing was forgotten
        return _build(arrays, meta), int(meta["covered_seq"]), int(np.iinfo(np.int64).min if forgotten is None
                                                                     else forgotten)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zstandard.ZstdError) as err:
        log.warning("series table checkpoint %s unreadable (%s): loading the series files instead", path, err)
        return None


def _build(arrays: dict, meta: dict) -> Catalog:
    cat = Catalog()
    sids = arrays["sids"]
    cat.sids.extend(sids)
    cat.first_ms.extend(arrays["first_ms"])
    cat.last_ms.extend(arrays["last_ms"])
    cat.metric_idx.extend(arrays["metric_idx"])
    cat.index_later()
    if "order" in arrays and not cat.adopt_order(arrays["order"]):  # (absent in checkpoints before it was kept)
        log.warning("series table checkpoint: the saved sid order does not fit its sids; sorting them at first use")
    gidx_ends = np.cumsum(arrays["gidx_len"])
    for i, name in enumerate(meta["tables"]):
        table = MetricTable(name, i)
        table.gidx.extend(arrays["gidx"][gidx_ends[i] - arrays["gidx_len"][i]:gidx_ends[i]])
        cat.tables.append(table)
        cat.metrics[name] = table
    codes_ends = np.cumsum(arrays["codes_len"])
    for j, (table_index, name, values) in enumerate(meta["columns"]):
        col = Column(values)
        col.codes.extend(arrays["codes"][codes_ends[j] - arrays["codes_len"][j]:codes_ends[j]])
        cat.tables[table_index].columns[name] = col
    return cat
