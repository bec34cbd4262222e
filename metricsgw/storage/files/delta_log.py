"""What the table asks of delta-rs, for one kind's Delta table: the files its log lists, and a commit of add and
remove actions (with the writer's app transaction) retried when another writer took the log entry first.

Apart from table.py because this is the Delta log's format and delta-rs's calls (add actions and the stats readers
prune on, partition values, CommitFailedError), while table.py keeps what this writer decides: its sequence, the
snapshots and their pins, and when a removed file may be deleted.
"""

from __future__ import annotations

import json
import os
import time
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction as AppTransaction

from .kinds import KINDS, file_seq, file_writer
from .parquet_io import SampleFile

COMMIT_ATTEMPTS = 20  # a commit that loses the race for the next log entry is retried this often


def listed_files(dt: DeltaTable, kind: str, root: str) -> list:
    """The files the table of ``kind`` lists now: ``SampleFile``s by (partition start, seq) for samples (with the
    min/max of t their add actions carry), paths by seq (write order) for the side kinds."""
    acts = pa.table(dt.get_add_actions(flatten=True))
    if not acts.num_rows:
        return []
    paths = [os.path.join(root, unquote(p)) for p in acts.column("path").to_pylist()]
    if kind != "samples":
        return sorted(paths, key=file_seq)
    return sorted((SampleFile(p, int(h), file_seq(p), int(lo), int(hi), file_writer(p))
                   for p, h, lo, hi in zip(paths, acts.column("partition.hour").to_pylist(),
                                           acts.column("min.t").to_pylist(), acts.column("max.t").to_pylist())),
                  key=_sample_order)


def commit_actions(dt: DeltaTable, kind: str, root: str, adds: list[str], removes: list[str], writer_id: str,
                   wal_cut: int | None) -> None:
    """One commit to the table of ``kind``: ``adds`` (with their stats) and ``removes``, carrying the app
    transaction ``(writer_id, wal_cut)`` when ``wal_cut`` is given. Only this writer removes its files, so a
    commit that lost the race for the next log entry is retried on the newer version as it is."""
    spec = KINDS[kind]
    now_ms = int(time.time() * 1000)
    actions = [_add_action(root, p, spec.partition) for p in adds]
    actions += [RemoveAction(os.path.relpath(p, root), True, now_ms, None,
                             {spec.partition: _partition_value(p)}) for p in removes]
    props = CommitProperties(app_transactions=[AppTransaction(writer_id, wal_cut)]) if wal_cut else None
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            dt.create_write_transaction(actions, "append", spec.schema, partition_by=[spec.partition],
                                        commit_properties=props)
            dt.update_incremental()
            return
        except CommitFailedError as err:  # another process took the next log entry: retry on the new version
            dt.update_incremental()
            if attempt == COMMIT_ATTEMPTS - 1:
                raise OSError(f"commit to table/{kind} failed {COMMIT_ATTEMPTS} times: {err}") from err
            listed = {os.path.join(root, unquote(p)) for p in pa.table(dt.get_add_actions()).column(
                "path").to_pylist()}
            gone = [p for p in removes if p not in listed]
            if gone:  # only this writer removes its files: this cannot happen, say so rather than guess
                raise OSError(f"files removed by someone else meanwhile: {gone[:3]}") from err


def _partition_value(path: str) -> str:
    return os.path.basename(os.path.dirname(path)).split("=", 1)[1]


def _add_action(root: str, path: str, partition: str) -> AddAction:
    """An add action with the stats readers prune on: rows, and min/max of every integer column."""
    st = os.stat(path)
    meta = pq.ParquetFile(path).metadata
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    for ci in range(meta.num_columns):
        name = meta.schema.column(ci).name
        if meta.schema.column(ci).physical_type != "INT64":
            continue
        stats = [meta.row_group(rg).column(ci).statistics for rg in range(meta.num_row_groups)]
        if stats and all(s is not None and s.has_min_max for s in stats):  # partial stats would mislead pruning
            lo[name] = min(s.min for s in stats)
            hi[name] = max(s.max for s in stats)
    stats = {"numRecords": meta.num_rows, "minValues": lo, "maxValues": hi, "nullCount": {k: 0 for k in lo}}
    return AddAction(os.path.relpath(path, root), st.st_size, {partition: _partition_value(path)},
                     int(st.st_mtime * 1000), True, json.dumps(stats))


def _sample_order(f: SampleFile) -> tuple[int, int]:
    return f.partition_ms, f.seq
