"""Value types that cross the storage boundary."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import Labels


@dataclass(frozen=True)
class MetricMetadata:
    metric: str
    type: str  # counter, gauge, histogram, gaugehistogram, summary, info, stateset, unknown
    help: str = ""
    unit: str = ""


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

    def __len__(self) -> int:
        return len(self.sid)


@dataclass
class SeriesSet:
    """Series picked from the series table: ids and their label sets, in the same order."""

    ids: np.ndarray
    labels: list[Labels]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class SampleBlock:
    """Samples sorted by (sid, t), one per (sid, t); t in ms; v bit-exact."""

    sid: np.ndarray
    t: np.ndarray
    v: np.ndarray

    def __len__(self) -> int:
        return len(self.sid)

    @classmethod
    def empty(cls) -> "SampleBlock":
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
