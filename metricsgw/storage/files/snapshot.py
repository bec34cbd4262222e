"""What a reader holds: a ``Snapshot`` (the files of every kind at one generation of the table) and the ``Pin``
that keeps its files from being deleted until the reader lets go (table.py's ``collect`` waits for it).

Apart from table.py because readers (the querier, the follower, the file set's views) need only these values,
not the Delta tables behind them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .kinds import file_writer
from .parquet_io import SampleFile


@dataclass(frozen=True)
class Snapshot:
    """The files of one generation: what a reader may read until it releases its pin."""

    version: int  # local generation: grows at every change of the file lists
    samples: tuple[SampleFile, ...] = ()  # by (partition start, seq)
    series: tuple[str, ...] = ()  # by seq: write order
    spans: tuple[str, ...] = ()
    histograms: tuple[str, ...] = ()  # by seq
    exemplars: tuple[str, ...] = ()
    table_version: int = -1  # the samples table's Delta version this snapshot includes

    def paths(self) -> set[str]:
        return ({f.path for f in self.samples} | set(self.series) | set(self.spans) | set(self.histograms)
                | set(self.exemplars))

    def own(self, kind: str, writer: str) -> tuple[str, ...]:
        """Side files of ``kind`` this writer committed."""
        return tuple(p for p in getattr(self, kind) if file_writer(p) == writer)


class Pin:
    """A reader's hold on one snapshot; ``with pin as snap:`` releases it at the end (once)."""

    def __init__(self, snap: Snapshot, unpin: Callable[[int], None]) -> None:
        self.snapshot = snap
        self._unpin = unpin  # the table's count of readers per generation, which collect() waits on
        self._held = True

    def __enter__(self) -> Snapshot:
        return self.snapshot

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        if self._held:
            self._held = False
            self._unpin(self.snapshot.version)
