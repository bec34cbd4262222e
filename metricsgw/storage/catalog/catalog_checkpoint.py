"""The in-memory series table saved as it is (numpy columns + distinct label values), so start-up
loads arrays instead of parsing a million series keys.

``wal/<writer id>/catalog.zst`` (written atomically after a flush) holds every column of the Catalog and of its
metric tables, and ``covered_seq``: every series and spans file this writer committed to the table (table.py) with a
sequence number up to it is in the checkpoint; start-up adds only the files listed after it (and the WAL). It also
holds ``forgotten_until``: the series the head window had forgotten (in the files it covers, not in it) have no
sample after it, so a restart's reads ask the archive for older times as before. Retention dropping series discards
the checkpoint (they must not come back at a restart); the next flush writes a new one. A checkpoint may also hold
series newer than that (added since the WAL cut, or taken between flushes): they come back from the WAL anyway,
registering a known series is a no-op, and replay hands every series its records bring to the next flush's series
file (startup.py). A missing or unreadable checkpoint just means the slower full load (keysplit.py).

The file: a magic, a JSON header (what the arrays and columns are, and each one's length in the file), then each
array as its own zstd frame and each label column's values as packed by packed_values.py (Arrow's buffers; JSON in
version 2, which is still read). Its own frames rather than npz: a load reads each array once into its place (npz's
zip checked and copied 290 MB again, 0.5 s at 2.7M series), and a column's values stay packed until something reads
them (metric_table.Column).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import struct
import zipfile

import numpy as np
import zstandard

from ..files.fsync import fsync_dir
from ..files.kinds import file_seq
from .catalog import Catalog
from . import packed_values
from .metric_table import Column, Grow, MetricTable

log = logging.getLogger(__name__)

NAME = "catalog.zst"
_LEGACY_NAME = "catalog.npz.zst"  # version 1 (npz, every label value in one JSON): read, replaced by the next save
ZSTD_LEVEL = 3
_MAGIC = b"MGWCATv2"
_VERSION = 3
_JSON_VALUES = 2  # the version that packed each column's values as zstd JSON: read, replaced by the next save
_HEADER_LEN = struct.Struct("<Q")
_ARRAYS = (("sids", "<i8"), ("order", "<i4"), ("first_ms", "<i8"), ("last_ms", "<i8"), ("metric_idx", "<i4"),
           ("gidx", "<i8"), ("gidx_len", "<i8"), ("codes", "<i4"), ("codes_len", "<i8"))


def snapshot(catalog: Catalog) -> dict:
    """A consistent copy of the catalog's columns (take it where no series is being added)."""
    n = len(catalog)
    tables, gidx, columns, codes = [], [], [], []
    for t in catalog.tables:
        tables.append(t.name)
        rows = len(t)
        gidx.append(t.gidx.view[:rows].copy())
        for name, col in t.columns.items():
            # values a restart never made strings are saved as they are; others as a copy (appends go on)
            saved = col.saved_form()
            columns.append([t.index, name, saved if saved is not None else list(col.values)])
            c = col.codes.view[:rows]
            codes.append(np.concatenate([c, np.zeros(rows - len(c), np.int32)]) if len(c) < rows else c.copy())
    return {"sids": catalog.sids.view[:n].copy(), "first_ms": catalog.first_ms.view[:n].copy(),
            "last_ms": catalog.last_ms.view[:n].copy(), "metric_idx": catalog.metric_idx.view[:n].copy(),
            "tables": tables, "gidx": gidx, "columns": columns, "codes": codes}


def covered_seq(files, writer: str) -> int:
    """The highest sequence number among a table snapshot's series and spans files of ``writer``."""
    return max((file_seq(p) for p in (*files.own("series", writer), *files.own("spans", writer))), default=0)


def size(root: str) -> int:
    """Bytes of the checkpoint in ``root`` (0: none)."""
    for name in (NAME, _LEGACY_NAME):
        with contextlib.suppress(OSError):
            return os.path.getsize(os.path.join(root, name))
    return 0


def discard(root: str) -> None:
    """Remove the checkpoint (it holds series retention has dropped); start-up then reads the series files."""
    for name in (NAME, _LEGACY_NAME):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(root, name))
            fsync_dir(root)


def save(root: str, snap: dict, covered_seq: int) -> None:
    empty64 = np.empty(0, np.int64)
    # the sids' order too (sorted outside the lock the snapshot was taken under): a restart's lookups need it
    arrays = {"sids": snap["sids"], "order": np.argsort(snap["sids"], kind="stable"),
              "first_ms": snap["first_ms"], "last_ms": snap["last_ms"], "metric_idx": snap["metric_idx"],
              "gidx": np.concatenate(snap["gidx"]) if snap["gidx"] else empty64,
              "gidx_len": np.array([len(g) for g in snap["gidx"]], np.int64),
              "codes": np.concatenate(snap["codes"]) if snap["codes"] else np.empty(0, np.int32),
              "codes_len": np.array([len(c) for c in snap["codes"]], np.int64)}
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    frames = [compressor.compress(np.ascontiguousarray(arrays[name], dtype).tobytes()) for name, dtype in _ARRAYS]
    packed = [v if isinstance(v, bytes) else packed_values.pack_list(v) if isinstance(v, list) else packed_values.pack(v)
              for _, _, v in snap["columns"]]
    header = json.dumps({"version": _VERSION, "covered_seq": covered_seq, "forgotten_until": snap.get("forgotten_until"),
                         "tables": snap["tables"], "columns": [[t, name] for t, name, _ in snap["columns"]],
                         "arrays": [[name, dtype, len(arrays[name]), len(f)] for (name, dtype), f in zip(_ARRAYS, frames)],
                         "packed": [len(p) for p in packed]},
                        ensure_ascii=False).encode("utf-8", "surrogatepass")
    path = os.path.join(root, NAME)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(_MAGIC + _HEADER_LEN.pack(len(header)) + header)
            for part in (*frames, *packed):
                fh.write(part)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(root, _LEGACY_NAME))
        fsync_dir(root)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def load(root: str) -> tuple[Catalog, int, int] | None:
    """(the catalog, covered_seq, forgotten_until), or None if there is no usable checkpoint."""
    path = os.path.join(root, NAME)
    if not os.path.exists(path):
        legacy = os.path.join(root, _LEGACY_NAME)
        return _load_legacy(legacy) if os.path.exists(legacy) else None
    try:
        with open(path, "rb") as fh:
            raw = memoryview(fh.read())
        if raw[:len(_MAGIC)] != _MAGIC:
            raise ValueError("not a series table checkpoint")
        at = len(_MAGIC) + _HEADER_LEN.size
        (header_len,) = _HEADER_LEN.unpack(raw[len(_MAGIC):at])
        meta = json.loads(bytes(raw[at:at + header_len]).decode("utf-8", "surrogatepass"))
        if meta["version"] not in (_VERSION, _JSON_VALUES) or [a[:2] for a in meta["arrays"]] != [list(a) for a in _ARRAYS]:
            return None
        at += header_len
        decompressor = zstandard.ZstdDecompressor()
        arrays = {}
        for name, dtype, n, size in meta["arrays"]:
            data = decompressor.decompress(raw[at:at + size], max_output_size=n * np.dtype(dtype).itemsize)
            arrays[name] = np.frombuffer(data, dtype)
            if len(arrays[name]) != n:
                raise ValueError(f"{name}: {len(arrays[name])} values where the header says {n}")
            at += size
        packed = []
        for size in meta["packed"]:
            packed.append(bytes(raw[at:at + size]))
            at += size
        if at != len(raw) or len(packed) != len(meta["columns"]):
            raise ValueError("the file's length is not what its header says")
        if meta["version"] == _JSON_VALUES:
            packed = [_json_values(p) for p in packed]
        return _loaded(_build(arrays, meta, packed), meta)
    except (OSError, ValueError, KeyError, TypeError, struct.error, zstandard.ZstdError) as err:
        log.warning("series table checkpoint %s unreadable (%s): loading the series files instead", path, err)
        return None


def _load_legacy(path: str) -> tuple[Catalog, int, int] | None:
    """A version 1 checkpoint (an upgraded gateway's first start: without it, 2.7M series took 38 s to load from
    the series files instead of 2)."""
    try:
        with open(path, "rb") as fh:
            raw = zstandard.ZstdDecompressor().decompress(fh.read())
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays["strings"].tobytes().decode("utf-8", "surrogatepass"))
        if meta["version"] != 1:
            return None
        if "order" not in arrays:  # (before the order was kept)
            arrays["order"] = np.argsort(arrays["sids"], kind="stable")
        values = [v for _, _, v in meta["columns"]]
        meta["columns"] = [[t, name] for t, name, _ in meta["columns"]]
        return _loaded(_build(arrays, meta, values), meta)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zstandard.ZstdError) as err:
        log.warning("series table checkpoint %s unreadable (%s): loading the series files instead", path, err)
        return None


def _json_values(packed: bytes) -> list[str]:
    """A version 2 checkpoint's column values (an upgraded gateway's first start)."""
    return json.loads(zstandard.ZstdDecompressor().decompress(packed).decode("utf-8", "surrogatepass"))


def _loaded(cat: Catalog, meta: dict) -> tuple[Catalog, int, int]:
    forgotten = meta.get("forgotten_until")  # absent before the head window: nothing was forgotten
    return cat, int(meta["covered_seq"]), int(np.iinfo(np.int64).min if forgotten is None else forgotten)


def _build(arrays: dict, meta: dict, values: list[bytes | list[str]]) -> Catalog:
    """The catalog from a checkpoint's arrays; ``values``: each column's, packed (version 3) or a list."""
    cat = Catalog()
    sids = arrays["sids"]
    cat.sids = Grow.of(sids, np.int64)
    cat.first_ms = Grow.of(arrays["first_ms"], np.int64, np.iinfo(np.int64).max)
    cat.last_ms = Grow.of(arrays["last_ms"], np.int64, np.iinfo(np.int64).min)
    cat.metric_idx = Grow.of(arrays["metric_idx"], np.int32)
    if not cat.adopt_order(arrays["order"]):
        log.warning("series table checkpoint: the saved sid order does not fit its sids; sorting them instead")
        cat.index_loaded()
    gidx_ends = np.cumsum(arrays["gidx_len"])
    for i, name in enumerate(meta["tables"]):
        table = MetricTable(name, i)
        table.gidx = Grow.of(arrays["gidx"][gidx_ends[i] - arrays["gidx_len"][i]:gidx_ends[i]], np.int64)
        cat.tables.append(table)
        cat.metrics[name] = table
    codes_ends = np.cumsum(arrays["codes_len"])
    for j, (table_index, name) in enumerate(meta["columns"]):
        col = Column(packed=values[j]) if isinstance(values[j], bytes) else Column(values[j])
        col.codes = Grow.of(arrays["codes"][codes_ends[j] - arrays["codes_len"][j]:codes_ends[j]], np.int32)
        cat.tables[table_index].columns[name] = col
    return cat
