"""The read seam: what the PromQL engine and the metadata APIs ask of whatever holds the samples.

As Prometheus' ``storage/interface.go`` declares its Querier, these Protocols declare ours. They are
structural: an implementation does not inherit from them, it has the methods with these signatures
(tests/storage/test_seam.py checks every in-process one, so a method added here must be added everywhere):

- ``storage/store.py`` Storage (the table through DuckDB, plus this process's heads);
- ``cluster/source.py`` ClusterSource (a Storage plus what every peer, shard or gateway, holds in memory);
- ``storage/read/recent.py`` RecentView (a process's heads only: what a head read answers a peer from);
- ``promql/batching.py`` FixedSelection (a source whose selection is one batch of series, already charged);
- ``promql/memsource.py`` MemSource (the in-memory double of the tests and the golden scripts).

tests/conformance runs the same data and queries through the double and every layout a gateway runs in,
and expects identical answers.

Common to every method:

- Times are milliseconds since the epoch; windows are closed, ``[start_ms, end_ms]``; ``None`` (series
  and labels only) leaves that side open.
- A series id is ``model.series_id`` of its labels (the same in every process), so ids from two
  implementations name the same series.
- ``ctx`` is the query's QueryContext: a method charges it for what it holds (series, samples) as it
  loads them, and calls ``ctx.check`` between steps, so a deadline or a client gone stops it (QueryTimeout,
  QueryCanceled) and a budget passed raises LimitExceeded (errorType execution). Callers never charge
  again what a method charged. The budgets are the caller's to choose: a user's query has the user's
  limits; a read made on behalf of another process (a peer's head read) is charged to its own context.
- Nothing is written: a reader sees one consistent view per call (Storage pins a table snapshot and its
  heads under one lock); two calls of one query may see newer data in between.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..limits.context import QueryContext
from ..model import Matcher, SampleBlock
from .batch import HistogramBlock, SeriesSet


@runtime_checkable
class SeriesReader(Protocol):
    """Series selection: what every reader has, the engine's and the metadata APIs'."""

    def select_series(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                      ctx: QueryContext | None = None, limit: int | None = None) -> SeriesSet:
        """The series matching every one of ``matchers`` whose samples span (first to last sample held)
        overlaps the window; each once, sorted by labels, ``ids[i]`` the id of ``labels[i]``. A series may
        be selected and still have no sample inside the window (its span covers the window's gap).

        ``limit``: at most that many series (a metadata API's cap; None: all). Charges
        ``ctx.charge_series`` for every series returned, before it reads their labels (a ClusterSource
        charges its peers' series as they arrive, so a series two places hold counts twice); without ``ctx``
        nothing is charged or checked."""
        ...


@runtime_checkable
class SampleReader(SeriesReader, Protocol):
    """What the PromQL engine reads float samples through (promql/selectors.py)."""

    def estimate_samples(self, series: SeriesSet, start_ms: int, end_ms: int) -> int:
        """About how many samples ``read_samples`` of these series over the window would load, from what is
        known without reading (time spans, the scrape interval); the engine refuses a selection whose
        estimate passes the query's budget before loading anything. Charges nothing."""
        ...

    def read_samples(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> SampleBlock:
        """The float samples of series ``ids`` (any order, repeats allowed) in the window: sorted by
        (sid, t), one per (sid, t) -- where two places hold the same (sid, t) (a sample being flushed, a
        peer and the table), the first written wins. An id nothing holds contributes nothing. Stale markers
        are samples (the STALE_NAN bit pattern). Charges ``ctx.charge_samples`` for every sample as it
        is loaded, including those merged away as duplicates."""
        ...


@runtime_checkable
class HistogramReader(Protocol):
    """Native histograms, for the readers that hold them (the engine asks ``hasattr(source,
    "histogram_metrics")`` and reads floats only otherwise)."""

    def histogram_metrics(self) -> frozenset[str]:
        """Names of the metrics with native histograms stored; charges nothing."""
        ...

    def read_histograms(self, ids: np.ndarray, start_ms: int, end_ms: int, ctx: QueryContext) -> HistogramBlock:
        """The native histograms of series ``ids`` in the window, with read_samples' ordering (by (sid, t),
        one per (sid, t), the first written wins) and charging (each as it is loaded)."""
        ...


@runtime_checkable
class MetadataReader(SeriesReader, Protocol):
    """What /api/v1/series, /labels and /label/<name>/values read (api/metadata.py): the series table, never
    samples."""

    def label_names(self, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                    ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        """The label names of the series ``select_series`` would select (no matchers: every series), sorted,
        each once; ``limit``: the first that many. The local series table's series are not charged (``ctx`` is
        checked only); a ClusterSource charges the series its peers send."""
        ...

    def label_values(self, name: str, matchers: list[Matcher], start_ms: int | None, end_ms: int | None,
                     ctx: QueryContext | None = None, limit: int | None = None) -> list[str]:
        """The non-empty values of label ``name`` among those series, sorted, each once; ``limit`` as for
        label_names. Charged as label_names."""
        ...
