"""Value types that cross the storage boundary."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import Labels, MetricMetadata


def _empty_i64() -> np.ndarray:
    return np.empty(0, np.int64)


@dataclass
class NativeSamples:
    """Native histograms and exemplars to store, one row each (any order).

    A histogram is its remote-write protobuf bytes exactly as sent (remote/native.py); an
    exemplar's labels are a ``model.series_key``."""

    hist_sid: np.ndarray = field(default_factory=_empty_i64)
    hist_t: np.ndarray = field(default_factory=_empty_i64)
    hist_blob: list[bytes] = field(default_factory=list)
    ex_sid: np.ndarray = field(default_factory=_empty_i64)
    ex_t: np.ndarray = field(default_factory=_empty_i64)
    ex_v: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    ex_labels: list[bytes] = field(default_factory=list)
    # Of series the relabel rules dropped: not stored, but "written" for Remote-Write 2.0's headers.
    dropped_histograms: int = 0
    dropped_exemplars: int = 0

    @property
    def histograms(self) -> int:
        return len(self.hist_blob)

    @property
    def exemplars(self) -> int:
        return len(self.ex_labels)

    def __bool__(self) -> bool:
        return bool(self.hist_blob or self.ex_labels)


@dataclass
class HistogramBlock:
    """Histogram samples sorted by (sid, t), one per (sid, t); ``blob`` the stored protobuf bytes."""

    sid: np.ndarray
    t: np.ndarray
    blob: list[bytes]

    def __len__(self) -> int:
        return len(self.sid)


@dataclass
class ExemplarBlock:
    """Exemplars sorted by (sid, t); labels as ``model.series_key`` bytes."""

    sid: np.ndarray
    t: np.ndarray
    v: np.ndarray
    labels: list[bytes]

    def __len__(self) -> int:
        return len(self.sid)


@dataclass
class AppendBatch:
    """What the ingest pipeline hands storage: already validated, relabelled and admitted."""

    new_series: list[tuple[int, Labels]] = field(default_factory=list)
    sid: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    t: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    v: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    metadata: list[MetricMetadata] = field(default_factory=list)
    # model.series_key of each new series, when the pipeline already built them (the WAL record reuses them)
    series_keys: list[bytes] | None = None
    native: NativeSamples | None = None  # histograms and exemplars (None: none)
    # Set by storage when it applies the batch: each sample's series as a dense index of the catalog of that
    # ``rows_epoch`` (storage's series epoch: a catalog rebuilt by retention renumbers them). The WAL encoder
    # finds segment refs by it (walcodec.RefTable) instead of searching the sids again.
    rows: np.ndarray | None = None
    rows_epoch: int = -1

    def __len__(self) -> int:
        return len(self.sid)


@dataclass
class SeriesSet:
    """Series picked from the series table: ids and their label sets, in the same order."""

    ids: np.ndarray
    labels: list[Labels]
    # The label sets are in ascending order (the order Prometheus lists series in), so the engine need not compare
    # them to put its rows in that order. False says nothing.
    label_sorted: bool = False

    def __len__(self) -> int:
        return len(self.ids)
