"""Start-up: the series table, spans and the WAL's acknowledged records back into memory, in bulk.

Nothing here works per series or per sample in Python: series come as key bytes from the
series files and from every WAL record, and are registered in one ``Catalog.add_keys`` call
(keysplit.py); samples go to the head as the decoded record columns; series time spans are
extended once at the end. A million series used to cost ~20 s of per-series Python here.
"""

from __future__ import annotations

import os

import numpy as np

from ... import npsort
from ..catalog import catalog_checkpoint
from ..catalog.side_index import unknown_series
from ..files import parquet_io
from ..wal.native_wal import NativeSegmentDecoder
from ..wal.wal import list_segments, read_segment, segment_name


def load_series(storage) -> None:
    """This writer's flushed series and each series' time span: its checkpoint, then the series and
    spans files it committed to the table (already opened) after it."""
    covered = storage.book.load_checkpoint()
    files = storage.table.current
    cat = storage.catalog
    own = storage.writer_id
    newer = [p for p in files.own("series", own) if catalog_checkpoint.file_seq(p) > covered]
    if not len(cat):  # no checkpoint: every key, in one bulk registration
        if newer:
            cat.add_keys(*parquet_io.read_series(newer))
    else:  # a checkpoint taken between flushes holds most of what the next flushes' files name: the rest alone
        for path in newer:  # (reading every key again was 0.9 s of a restart at 2.7M series)
            sids, keys = unknown_series(cat.lookup, path)
            if len(sids):
                cat.add_keys(sids, keys)
    for path in files.own("spans", own):
        if catalog_checkpoint.file_seq(path) <= covered:
            continue
        cat.touch_spans(*parquet_io.read_spans(path))


def replay_wal(storage, wal_dir: str, flushed_upto: int) -> int:
    """Apply every record of the segments after ``flushed_upto`` (deleting the older ones);
    returns the number of records."""
    new_sids: list[np.ndarray] = []
    new_keys: list[bytes] = []
    sids: list[np.ndarray] = []
    times: list[np.ndarray] = []
    replayed = 0
    for seg in list_segments(wal_dir):
        path = os.path.join(wal_dir, segment_name(seg))
        if seg <= flushed_upto:
            os.remove(path)
            continue
        decoder = NativeSegmentDecoder()
        for payload in read_segment(path):
            batch, rec_sids, rec_keys = decoder.decode_raw(payload)
            new_sids.append(rec_sids)
            new_keys.extend(rec_keys)
            for m in batch.metadata:
                storage.metadata_by_metric.setdefault(m.metric, {})[m] = None
            if len(batch.sid):
                storage.files.append(batch.sid, batch.t, batch.v)
                sids.append(batch.sid)
                times.append(batch.t)
            if batch.native:
                storage.native.replay(batch.native)
                sids.append(batch.native.hist_sid)
                times.append(batch.native.hist_t)
            replayed += 1
    if new_keys:
        all_sids = np.concatenate(new_sids)
        storage.catalog.add_keys(all_sids, new_keys)
        # Every series a replayed record brought goes to the next flush's series file, known or not: a checkpoint
        # taken after the WAL cut (appends go on meanwhile) knows series that no series file holds yet, and
        # without one the table's other readers never learn their labels. A series written again is harmless.
        _, first = npsort.unique_first(all_sids)
        first.sort()
        storage.unflushed.add(all_sids[first], [new_keys[i] for i in first.tolist()])
    if sids:
        storage.catalog.touch(np.concatenate(sids), np.concatenate(times))
    return replayed
