"""The table's kinds (one Delta table each: its file name prefix, partition column and schema) and the names of
its files, ``<prefix>-<writer>-<seq>.parquet``: what a path says about its writer and its place in write order."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pyarrow as pa



@dataclass(frozen=True)
class Kind:
    prefix: str  # file names: <prefix>-<writer>-<seq>.parquet
    partition: str  # the partition column: "hour" (partition start, ms) or "writer"
    schema: pa.Schema  # the table's columns as Delta stores them (the partition column included)


_SIDE_SCHEMA_WRITER = ("writer", pa.string())
KINDS: dict[str, Kind] = {
    "samples": Kind("part", "hour", pa.schema([("metric", pa.string()), ("sid", pa.int64()), ("t", pa.int64()),
                                               ("v", pa.float64()), ("hour", pa.string())])),
    "series": Kind("series", "writer", pa.schema([("sid", pa.int64()), ("key", pa.binary()), _SIDE_SCHEMA_WRITER])),
    "spans": Kind("spans", "writer", pa.schema([("sid", pa.int64()), ("min_t", pa.int64()), ("max_t", pa.int64()),
                                                _SIDE_SCHEMA_WRITER])),
    # native histograms and exemplars (storage/files/native_files.py), by hour like the samples
    "histograms": Kind("hist", "hour", pa.schema([("sid", pa.int64()), ("t", pa.int64()), ("h", pa.binary()),
                                                  ("hour", pa.string())])),
    "exemplars": Kind("exemplars", "hour", pa.schema([("sid", pa.int64()), ("t", pa.int64()), ("v", pa.float64()),
                                                      ("labels", pa.binary()), ("hour", pa.string())])),
}
SIDE_KINDS = tuple(k for k in KINDS if k != "samples")
_NAME_RE = re.compile(r"^([a-z]+)-([A-Za-z0-9_-]+)-(\d+)\.parquet$")


def parse_name(path: str) -> tuple[str, str, int] | None:
    """(prefix, writer, seq) of a table file name, or None for any other file."""
    m = _NAME_RE.match(os.path.basename(path))
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


def file_seq(path: str) -> int:
    return int(os.path.basename(path).rsplit("-", 1)[1].split(".", 1)[0])


def file_writer(path: str) -> str:
    parsed = parse_name(path)
    return parsed[1] if parsed else ""
