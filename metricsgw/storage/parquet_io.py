"""Parquet files on disk: hive-style time partitions of samples, and the series table.

    <path>/samples/hour=<partition start, unix ms>/part-<seq>.parquet   (metric, sid, t, v)
    <path>/series/series-<seq>.parquet                                  (sid, key: model.series_key)

Sample files are sorted by (metric, sid, t) in row groups of 128k rows, so row-group statistics
let a cold read skip the metrics it does not want;
``t`` is delta-encoded and ``v`` byte-stream-split, both zstd: regular scrapes cost ~1-2 bytes
per sample. Every file is written under a ``.tmp`` name, fsync'd, then renamed, then the
directory fsync'd: a crash leaves either the whole file or a ``.tmp`` that start-up deletes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..model import series_keys
from .wal import fsync_dir

SERIES_SCHEMA = pa.schema([("sid", pa.int64()), ("key", pa.binary())])
_PART_RE = re.compile(r"^hour=(-?\d+)$")
_FILE_RE = re.compile(r"^(?:part|series)-(\d+)\.parquet$")


@dataclass(frozen=True)
class SampleFile:
    path: str
    partition_ms: int  # partition start
    seq: int
    min_t: int
    max_t: int


# How every sample file is laid out (flushes and compaction alike): rows sorted by (metric, sid, t).
SAMPLE_ROW_GROUP_ROWS = 1 << 17
SAMPLE_SCHEMA = pa.schema([("metric", pa.dictionary(pa.int32(), pa.string())), ("sid", pa.int64()),
                           ("t", pa.int64()), ("v", pa.float64())])


def sample_file_options() -> dict:
    """``pyarrow.parquet.ParquetWriter`` options of a sample file (a fresh dict: callers may add to it)."""
    return {"compression": "zstd", "compression_level": 3, "use_dictionary": ["metric"],
            "column_encoding": {"t": "DELTA_BINARY_PACKED", "v": "BYTE_STREAM_SPLIT", "sid": "DELTA_BINARY_PACKED"}}


def sample_table(metric_codes: np.ndarray, metric_names: pa.Array | list[str], sid: np.ndarray, t: np.ndarray,
                 v: np.ndarray) -> pa.Table:
    """Columns as a table of ``SAMPLE_SCHEMA``; the metric column is given dictionary-encoded
    (codes into metric_names) so no string is built per sample."""
    metric = pa.DictionaryArray.from_arrays(pa.array(metric_codes, pa.int32()), pa.array(metric_names, pa.string()))
    return pa.table([metric, pa.array(sid, pa.int64()), pa.array(t, pa.int64()), pa.array(v, pa.float64())],
                    schema=SAMPLE_SCHEMA)


def _write_atomic(table: pa.Table, path: str, **options) -> None:
    tmp = path + ".tmp"
    try:
        pq.write_table(table, tmp, **({"compression": "zstd"} | options))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:  # disk full, I/O error: leave no half-written file behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(path))


def write_samples(root: str, partition_ms: int, seq: int, metric_codes: np.ndarray, metric_names: list[str],
                  sid: np.ndarray, t: np.ndarray, v: np.ndarray) -> SampleFile:
    """Write one partition's samples, already sorted by (metric, sid, t); the metric column is given
    dictionary-encoded (codes into metric_names) so no string is built per sample."""
    pdir = os.path.join(root, "samples", f"hour={partition_ms}")
    new_dir = not os.path.isdir(pdir)
    os.makedirs(pdir, exist_ok=True)
    if new_dir:
        fsync_dir(os.path.dirname(pdir))
    table = sample_table(metric_codes, metric_names, sid, t, v)
    path = os.path.join(pdir, f"part-{seq:08d}.parquet")
    _write_atomic(table, path, row_group_size=SAMPLE_ROW_GROUP_ROWS, **sample_file_options())
    return SampleFile(path, partition_ms, seq, int(t.min()), int(t.max()))


def write_series(root: str, seq: int, series: list[tuple[int, bytes]]) -> str:
    """Series as (sid, ``model.series_key``): start-up splits the keys of all series at once
    (keysplit.py), where a JSON object per series cost a parse per series."""
    sdir = os.path.join(root, "series")
    os.makedirs(sdir, exist_ok=True)
    table = pa.table({"sid": pa.array([s for s, _ in series], pa.int64()),
                      "key": pa.array([k for _, k in series], pa.binary())}, schema=SERIES_SCHEMA)
    path = os.path.join(sdir, f"series-{seq:08d}.parquet")
    _write_atomic(table, path)
    return path


def clean_temporaries(root: str) -> int:
    """Delete half-written files a crash left behind."""
    removed = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".tmp"):
                os.remove(os.path.join(dirpath, f))
                removed += 1
    return removed


def list_sample_files(root: str) -> list[SampleFile]:
    out: list[SampleFile] = []
    sroot = os.path.join(root, "samples")
    if not os.path.isdir(sroot):
        return out
    for pname in os.listdir(sroot):
        pm = _PART_RE.match(pname)
        if not pm:
            continue
        for fname in os.listdir(os.path.join(sroot, pname)):
            fm = _FILE_RE.match(fname)
            if not fm:
                continue
            path = os.path.join(sroot, pname, fname)
            out.append(describe_sample_file(path, int(pm.group(1)), int(fm.group(1))))
    return sorted(out, key=lambda f: (f.partition_ms, f.seq))


def describe_sample_file(path: str, partition_ms: int, seq: int) -> SampleFile:
    lo, hi = _t_range(pq.ParquetFile(path).metadata)
    return SampleFile(path, partition_ms, seq, lo, hi)


def _t_range(meta: pq.FileMetaData) -> tuple[int, int]:
    col = meta.schema.names.index("t")
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for rg in range(meta.num_row_groups):
        st = meta.row_group(rg).column(col).statistics
        if st is not None and st.has_min_max:
            lo, hi = min(lo, st.min), max(hi, st.max)
    return lo, hi


def read_series_files(root: str, after_seq: int = 0) -> tuple[np.ndarray, list[bytes], int]:
    """The series of the files numbered above ``after_seq`` as (sids, series keys), and the highest
    file sequence number seen.
    Files of earlier versions hold the labels as JSON (column ``labels``); a merge of old and new
    files holds both columns, one of them null per row."""
    sdir = os.path.join(root, "series")
    sids: list[np.ndarray] = []
    keys: list[bytes] = []
    max_seq = 0
    if not os.path.isdir(sdir):
        return np.empty(0, np.int64), keys, max_seq
    for fname in sorted(os.listdir(sdir)):
        m = _FILE_RE.match(fname)
        if not m:
            continue
        max_seq = max(max_seq, int(m.group(1)))
        if int(m.group(1)) <= after_seq:
            continue
        table = pq.read_table(os.path.join(sdir, fname))
        sids.append(table.column("sid").to_numpy())
        file_keys = table.column("key").to_pylist() if "key" in table.column_names else [None] * table.num_rows
        if "labels" in table.column_names:
            legacy = [i for i, k in enumerate(file_keys) if k is None]
            labels = table.column("labels").take(legacy).to_pylist()
            for i, lk in zip(legacy, series_keys([tuple(sorted(json.loads(lj).items())) for lj in labels])):
                file_keys[i] = lk
        keys.extend(file_keys)
    return (np.concatenate(sids) if sids else np.empty(0, np.int64)), keys, max_seq
