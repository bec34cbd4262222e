"""Parquet files of native histograms and exemplars (table kinds ``histograms``, ``exemplars``: storage/files/table.py).

    histograms: sid int64, t int64, h binary (the remote-write Histogram bytes as sent)
    exemplars:  sid int64, t int64, v float64, labels binary (model.series_key)

Each file is sorted by (sid, t) and holds each (sid, t) once (exemplars: each (sid, t, labels,
v) once), written atomically (tmp, fsync, rename) like the sample files. A flush writes one file of
each kind per partition its rows fall in; compaction merges a closed partition's files; retention
retires a file with its partition (``t_range`` reads a file's times from the footer's statistics,
cached per path).
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..batch import ExemplarBlock, HistogramBlock
from . import parquet_io
from .parquet_io import write_atomic

HIST_SCHEMA = pa.schema([("sid", pa.int64()), ("t", pa.int64()), ("h", pa.binary())])
EXEMPLAR_SCHEMA = pa.schema([("sid", pa.int64()), ("t", pa.int64()), ("v", pa.float64()), ("labels", pa.binary())])


METRICS_KEY = b"metricsgw.metrics"  # footer metadata: the metric names a histograms file holds


def write_histograms(path: str, block: HistogramBlock, metrics: set[str]) -> None:
    schema = HIST_SCHEMA.with_metadata({METRICS_KEY: json.dumps(sorted(metrics)).encode()})
    write_atomic(pa.table([pa.array(block.sid), pa.array(block.t), block.blob], schema=schema), path)


@functools.lru_cache(maxsize=65536)
def metrics_of(path: str) -> frozenset[str]:
    """The metric names of a histograms file, from its footer (files never change once written)."""
    meta = pq.read_schema(path).metadata or {}
    return frozenset(json.loads(meta.get(METRICS_KEY, b"[]")))


def write_exemplars(path: str, block: ExemplarBlock) -> None:
    write_atomic(pa.table([pa.array(block.sid), pa.array(block.t), pa.array(block.v), block.labels],
                          schema=EXEMPLAR_SCHEMA), path)


def _read(path: str, ids_sorted: np.ndarray | None, start_ms: int, end_ms: int) -> pa.Table:
    """Rows in [start_ms, end_ms] of these series (None: of every series)."""
    table = pq.read_table(path, filters=[("t", ">=", start_ms), ("t", "<=", end_ms)])
    if table.num_rows and ids_sorted is not None:
        table = table.filter(pc.is_in(table["sid"], value_set=pa.array(ids_sorted)))
    return table


def read_histograms(path: str, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> HistogramBlock:
    t = _read(path, ids_sorted, start_ms, end_ms)
    return HistogramBlock(t["sid"].to_numpy(), t["t"].to_numpy(), t["h"].combine_chunks())


def read_exemplars(path: str, ids_sorted: np.ndarray, start_ms: int, end_ms: int) -> ExemplarBlock:
    t = _read(path, ids_sorted, start_ms, end_ms)
    return ExemplarBlock(t["sid"].to_numpy(), t["t"].to_numpy(), t["v"].to_numpy(), t["labels"].combine_chunks())


@functools.lru_cache(maxsize=65536)
def t_range(path: str) -> tuple[int, int]:
    """(oldest, newest) t of a file, from its footer (files never change once written)."""
    return parquet_io.t_range(pq.ParquetFile(path).metadata)
