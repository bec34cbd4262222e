"""Parquet files on disk: hive-style time partitions of samples, and the series table.

    <path>/samples/hour=<partition start, unix ms>/part-<seq>.parquet   (metric, sid, t, v)
    <path>/series/series-<seq>.parquet                                  (sid, labels_json)
    <path>/spans/spans-<seq>.parquet                                    (sid, min_t, max_t)

Names, versions and deletion belong to storage/fileset.py; this module only writes and reads files.

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

from ..model import Labels
from .wal import fsync_dir

SERIES_SCHEMA = pa.schema([("sid", pa.int64()), ("labels", pa.string())])


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


def write_samples(path: str, partition_ms: int, seq: int, metric_codes: np.ndarray, metric_names: list[str],
                  sid: np.ndarray, t: np.ndarray, v: np.ndarray) -> SampleFile:
    """Write one partition's samples, already sorted by (metric, sid, t); the metric column is given
    dictionary-encoded (codes into metric_names) so no string is built per sample."""
    table = sample_table(metric_codes, metric_names, sid, t, v)
    write_atomic(table, path, row_group_size=SAMPLE_ROW_GROUP_ROWS, **sample_file_options())
    return SampleFile(path, partition_ms, seq, int(t.min()), int(t.max()))


def write_series(path: str, series: list[tuple[int, Labels]]) -> None:
    table = pa.table({"sid": pa.array([s for s, _ in series], pa.int64()),
                      "labels": pa.array([json.dumps(dict(lb), separators=(",", ":")) for _, lb in series])},
                     schema=SERIES_SCHEMA)
    write_atomic(table, path)


def write_spans(path: str, sid: np.ndarray, t: np.ndarray) -> None:
    """Per-series first/last timestamps of samples sorted by (sid, t), so start-up rebuilds time spans cheaply."""
    starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
    ends = np.r_[starts[1:], len(sid)] - 1
    write_atomic(pa.table({"sid": sid[starts], "min_t": t[starts], "max_t": t[ends]}), path)


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


def read_series(paths: list[str]) -> list[tuple[int, Labels]]:
    """The series in these series files (a sid may repeat: its labels are the same)."""
    out: list[tuple[int, Labels]] = []
    for path in paths:
        table = pq.read_table(path)
        for sid, lj in zip(table.column("sid").to_pylist(), table.column("labels").to_pylist()):
            out.append((sid, tuple(sorted(json.loads(lj).items()))))
    return out


def read_spans(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tb = pq.read_table(path)
    return tuple(tb.column(n).to_numpy() for n in ("sid", "min_t", "max_t"))  # type: ignore[return-value]
