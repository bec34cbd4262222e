"""Parquet files on disk: hive-style time partitions of samples, and the series table.

    samples   (metric, sid, t, v)            one partition (hour) each
    series    (sid, key: model.series_key)
    spans     (sid, min_t, max_t)

Names, versions, commits and deletion belong to storage/files/table.py; this module only writes and reads files.

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
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...model import series_keys
from .fsync import fsync_dir

SERIES_SCHEMA = pa.schema([("sid", pa.int64()), ("key", pa.binary())])
SERIES_ROW_GROUP = 65_536


@dataclass(frozen=True)
class SampleFile:
    path: str
    partition_ms: int  # partition start
    seq: int
    min_t: int
    max_t: int
    writer: str = ""  # the writer id that committed it (storage/files/table.py)


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


def write_atomic(table: pa.Table, path: str, **options) -> None:
    """Write ``table`` under ``path.tmp``, fsync, rename, fsync the directory: a crash leaves the
    whole file or a ``.tmp`` (deleted at start-up); a failure leaves neither."""
    tmp = path + ".tmp"
    try:
        pq.write_table(table, tmp, **({"compression": "zstd"} | options))
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(path))


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_samples(path: str, partition_ms: int, seq: int, writer: str, metric_codes: np.ndarray, metric_names: list[str],
                  sid: np.ndarray, t: np.ndarray, v: np.ndarray) -> SampleFile:
    """Write one partition's samples, already sorted by (metric, sid, t); the metric column is given
    dictionary-encoded (codes into metric_names) so no string is built per sample."""
    table = sample_table(metric_codes, metric_names, sid, t, v)
    write_atomic(table, path, row_group_size=SAMPLE_ROW_GROUP_ROWS, **sample_file_options())
    return SampleFile(path, partition_ms, seq, int(t.min()), int(t.max()), writer)


def write_series(path: str, series: list[tuple[int, bytes]] | tuple[np.ndarray, pa.ChunkedArray]) -> None:
    """Series as (sid, ``model.series_key``) pairs or as (sids, keys) columns: start-up splits the keys
    of all series at once (keysplit.py), where a JSON object per series cost a parse per series."""
    if isinstance(series, tuple):
        sids, keys = series
    else:
        sids, keys = [s for s, _ in series], pa.array([k for _, k in series], pa.binary())
    table = pa.table({"sid": pa.array(sids, pa.int64()), "key": keys}, schema=SERIES_SCHEMA)
    # Row groups of 64k series: a restart reads the keys of only the series its checkpoint lacks (the newest, at the
    # file's end), and reading the one group of a 690k-series flush for them took 0.8 s.
    write_atomic(table, path, row_group_size=SERIES_ROW_GROUP)


def write_spans(path: str, sid: np.ndarray, t: np.ndarray) -> None:
    """Per-series first/last timestamps of samples sorted by (sid, t), so start-up rebuilds time spans cheaply."""
    starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
    ends = np.r_[starts[1:], len(sid)] - 1
    write_atomic(pa.table({"sid": sid[starts], "min_t": t[starts], "max_t": t[ends]}), path)


def describe_sample_file(path: str, partition_ms: int, seq: int, writer: str = "") -> SampleFile:
    lo, hi = t_range(pq.ParquetFile(path).metadata)
    return SampleFile(path, partition_ms, seq, lo, hi, writer)


def t_range(meta: pq.FileMetaData) -> tuple[int, int]:
    col = meta.schema.names.index("t")
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for rg in range(meta.num_row_groups):
        st = meta.row_group(rg).column(col).statistics
        if st is not None and st.has_min_max:
            lo, hi = min(lo, st.min), max(hi, st.max)
    return lo, hi


def read_series(paths: list[str]) -> tuple[np.ndarray, list[bytes]]:
    """The series in these series files as (sids, series keys); a sid may repeat (same key).
    Files of earlier versions hold the labels as JSON (column ``labels``); a merge of old and new
    files holds both columns, one of them null per row."""
    sids: list[np.ndarray] = []
    keys: list[bytes] = []
    for path in paths:
        table = pq.read_table(path)
        sids.append(table.column("sid").to_numpy())
        file_keys = table.column("key").to_pylist() if "key" in table.column_names else [None] * table.num_rows
        if "labels" in table.column_names:
            legacy = [i for i, k in enumerate(file_keys) if k is None]
            labels = table.column("labels").take(legacy).to_pylist()
            for i, lk in zip(legacy, series_keys([tuple(sorted(json.loads(lj).items())) for lj in labels])):
                file_keys[i] = lk
        keys.extend(file_keys)
    return (np.concatenate(sids) if sids else np.empty(0, np.int64)), keys


def read_series_sids(path: str) -> np.ndarray:
    """The sids of a series file, in its row order (no key read)."""
    return pq.read_table(path, columns=["sid"]).column(0).to_numpy()


def read_spans(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tb = pq.read_table(path)
    return tuple(tb.column(n).to_numpy() for n in ("sid", "min_t", "max_t"))  # type: ignore[return-value]
