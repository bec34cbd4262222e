"""One run of the advisor, whoever asks: ``metricsgw advise`` (command.py, over the gateway's HTTP API) and the
gateway's own ``/api/v1/status/advise`` (api/advise.py, over its storage or its shards) call ``advise`` with their
own ``Source`` of what is stored. Reading the usage files and judging are here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from .counts import Counts
from .propose import Proposals, metrics_to_list, propose
from .sources import dashboard_usage, query_log_usage, rule_file_usage
from .usage import Usage


@dataclass(frozen=True)
class Options:
    min_series: int = 1  # propose dropping unread metrics with at least this many series
    min_values: int = 2  # judge labels with at least this many values
    top: int = 10  # judge the labels of this many read metrics, those with the most series
    max_metrics: int = 100_000  # metrics asked of the series counts
    max_listed_series: int = 100_000  # series listed per judged metric


class Source(Protocol):
    """What the gateway stores."""

    def series_counts(self, limit: int) -> dict[str, int]:
        """Series per metric, the ``limit`` metrics with the most."""

    def list_series(self, metric: str, limit: int) -> list[dict[str, str]] | None:
        """The metric's series' label sets, or None when more than ``limit`` or cut short (nothing is proved from
        a partial listing)."""


@dataclass
class Advice:
    counts: Counts
    usage: Usage
    proposals: Proposals
    options: Options


def usage_of(dashboards: Iterable[str] = (), rules: Iterable[str] = (), query_logs: Iterable[str] = ()) -> Usage:
    """What the files read: Grafana dashboards, Prometheus rule files, query log files (OSError for a query log
    that cannot be read; a dashboard or rule file that cannot be read is reported in ``unparsed``)."""
    usage = Usage([], [])
    for path in dashboards:
        usage += dashboard_usage(path)
    for path in rules:
        usage += rule_file_usage(path)
    for path in query_logs:
        usage += query_log_usage(path)
    return usage


def advise(source: Source, usage: Usage, options: Options = Options()) -> Advice:
    """Ask ``source`` for the counts, list the series of the read metrics worth judging, propose."""
    counts = Counts(source.series_counts(options.max_metrics))
    for metric in metrics_to_list(counts.series, usage, options.min_series, options.top):
        found = source.list_series(metric, options.max_listed_series)
        if found is None or len(found) < counts.series.get(metric, 0):
            counts.truncated.add(metric)
        else:
            counts.listed[metric] = found
    return Advice(counts, usage, propose(counts, usage, options.min_series, options.min_values), options)
