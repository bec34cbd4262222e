"""New series whose defining WAL record is not on disk yet.

``Storage.append`` registers a write's new series in the catalog before its WAL record is written. When
that write fails (disk full: 503), the sender's retry finds the series known and so carries no series
key; had the retry been acknowledged and the process killed before the next flush, replay met samples
of a series no record defines and storage failed to open. So until a record defining a series is
fsync'd, every record naming that series defines it again (replay registers a series once however
often its key is recorded). Empty as soon as writes succeed: in steady state it costs nothing.
"""

from __future__ import annotations

import numpy as np

from ... import npsort
from ...model import Labels, series_keys
from ..batch import AppendBatch


class UndurableSeries:
    def __init__(self) -> None:
        self._by_sid: dict[int, tuple[Labels, bytes]] = {}

    def __len__(self) -> int:
        return len(self._by_sid)

    def add(self, fresh: list[tuple[int, Labels]], keys: list[bytes]) -> None:
        """Series just registered by an append whose record is not written yet."""
        self._by_sid.update(zip([sid for sid, _ in fresh], zip([lb for _, lb in fresh], keys)))

    def carry(self, batch: AppendBatch) -> None:
        """Define in ``batch`` (its ``new_series`` and ``series_keys``) the series it names that are
        registered but not yet defined by a record on disk."""
        if not self._by_sid:
            return
        named = batch.sid
        if batch.native:
            named = np.concatenate([named, batch.native.hist_sid, batch.native.ex_sid])
        defined = {sid for sid, _ in batch.new_series}
        get = self._by_sid.get
        extra = [(sid, hit) for sid in npsort.unique(named).tolist()
                 if sid not in defined and (hit := get(sid)) is not None]
        if not extra:
            return
        keys = batch.series_keys
        if keys is None or len(keys) != len(batch.new_series):
            keys = series_keys([lb for _, lb in batch.new_series])
        batch.new_series = batch.new_series + [(sid, lb) for sid, (lb, _) in extra]
        batch.series_keys = keys + [key for _, (_, key) in extra]

    def written(self, batch: AppendBatch) -> None:
        """``batch``'s record is on disk: the series it defines are durable."""
        if self._by_sid:
            for sid, _ in batch.new_series:
                self._by_sid.pop(sid, None)
