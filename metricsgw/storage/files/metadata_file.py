"""The metric metadata a writer received (type, help, unit per metric), kept in ``<writer dir>/metadata.json``
and written whole with each flush: a temporary file, fsync, rename, then the directory fsync'd."""

from __future__ import annotations

import contextlib
import json
import os

from ...model import MetricMetadata
from .fsync import fsync_dir

NAME = "metadata.json"


def write(writer_dir: str, meta: dict[str, list[MetricMetadata]]) -> None:
    path = os.path.join(writer_dir, NAME)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({k: [[m.type, m.help, m.unit] for m in v] for k, v in meta.items()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(path + ".tmp", path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")
        raise
    fsync_dir(writer_dir)


def load(writer_dir: str) -> dict[str, dict[MetricMetadata, None]]:
    """Metric -> its metadata entries (insertion-ordered, as the flush wrote them); empty before a first flush."""
    try:
        with open(os.path.join(writer_dir, NAME), encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    return {metric: {MetricMetadata(metric, *e): None for e in entries} for metric, entries in data.items()}
