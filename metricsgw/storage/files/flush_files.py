"""The files a flush writes for one head of float samples: one samples file per partition its samples fall in,
rows grouped by metric (so a read's scan prunes row groups by the metric column), and one spans file."""

from __future__ import annotations

import numpy as np

from ... import npsort
from ..catalog.catalog import Catalog
from . import parquet_io
from .transaction import Transaction


def write_head(tx: Transaction, sid: np.ndarray, t: np.ndarray, v: np.ndarray, catalog: Catalog,
               partition_ms: int, writer_id: str) -> None:
    """A head's columns (sorted by (sid, t), not empty) into ``tx``."""
    code, names = catalog.metric_rank_codes(catalog.dense(sid))
    part = t // partition_ms
    partitions = npsort.unique(part)
    for p in partitions:
        if len(partitions) > 1:
            m = np.flatnonzero(part == p)
            psid, pt, pv, pcode = sid[m], t[m], v[m], code[m]
        else:  # the usual case: the whole flush falls in one partition, no copies
            psid, pt, pv, pcode = sid, t, v, code
        # (sid, t) order is already there; a stable sort by metric keeps it within each metric.
        order = np.argsort(pcode, kind="stable")
        path, seq = tx.new_path("samples", int(p) * partition_ms)
        tx.add_samples(parquet_io.write_samples(path, int(p) * partition_ms, seq, writer_id, pcode[order], names,
                                                psid[order], pt[order], pv[order]))
    path, _ = tx.new_path("spans")
    parquet_io.write_spans(path, sid, t)
    tx.add_side("spans", path)
