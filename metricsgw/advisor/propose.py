"""Counts + usage -> proposals (pure: no I/O).

- **Drop** the metrics no query reads that have at least ``min_series`` series.
- **Remove a label** from a read metric when no query of it names the label (in a matcher, grouping, matching,
  label function, legend or alert text), it has at least ``min_values`` values, and the metric's complete
  series listing proves its series stay distinct without it (and without the labels already chosen for it).
  Otherwise the label is reported unsafe and not proposed. The queries the removal changes are those of the
  metric whose output may carry the label (no ``by`` aggregation above the selector): a removal that changes
  none is safe, and only safe ones are applied by the YAML (report.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .counts import Counts, distinct_without, label_stats
from .usage import EVERY_LABEL, Usage


@dataclass(frozen=True)
class LabelRemoval:
    metric: str
    labels: tuple[str, ...]
    values: tuple[int, ...]  # distinct values of each label
    bytes: int  # label bytes the series carry (name + value, once per series)
    queries: tuple[str, ...]  # whose output may show the label

    @property
    def safe(self) -> bool:
        """No query's answer changes: the only removals the YAML applies (the others are written commented out)."""
        return not self.queries


@dataclass(frozen=True)
class Unsafe:
    metric: str
    label: str  # "" for every label of a metric whose listing was truncated
    reason: str


@dataclass
class Proposals:
    drops: list[tuple[str, int]] = field(default_factory=list)  # (metric, series), most series first
    removals: list[LabelRemoval] = field(default_factory=list)
    unsafe: list[Unsafe] = field(default_factory=list)
    small_unread: int = 0  # unread metrics under min_series, left alone

    @property
    def dropped_series(self) -> int:
        return sum(n for _, n in self.drops)


def metrics_to_list(series: dict[str, int], usage: Usage, min_series: int, top: int) -> list[str]:
    """The ``top`` read metrics with the most series (at least ``min_series``): those whose labels are judged."""
    read = [m for m, n in series.items() if n >= min_series and usage.is_read(m)]
    return sorted(read, key=lambda m: (-series[m], m))[:top]


def propose(counts: Counts, usage: Usage, min_series: int = 1, min_values: int = 2) -> Proposals:
    out = Proposals()
    for metric, n in sorted(counts.series.items(), key=lambda kv: (-kv[1], kv[0])):
        if usage.is_read(metric):
            continue
        if n >= min_series:
            out.drops.append((metric, n))
        else:
            out.small_unread += 1
    for metric in sorted(counts.truncated):
        out.unsafe.append(Unsafe(metric, "", "its series listing was truncated: nothing proved"))
    for metric, series in sorted(counts.listed.items()):
        if usage.is_read(metric):
            _removals(out, metric, series, usage, min_values)
    return out


def _removals(out: Proposals, metric: str, series: list[dict[str, str]], usage: Usage, min_values: int) -> None:
    reads = usage.of(metric)
    named = set().union(*(r.labels for r in reads))
    if EVERY_LABEL in named:
        out.unsafe.append(Unsafe(metric, "", "a query matches its series with another's on every label"))
        return
    stats = label_stats(series)
    candidates = sorted((label for label, s in stats.items() if label not in named and s.values >= min_values),
                        key=lambda label: (-stats[label].bytes, label))
    chosen: list[str] = []
    for label in candidates:
        if distinct_without(series, {*chosen, label}):
            chosen.append(label)
        else:
            out.unsafe.append(Unsafe(metric, label, "unsafe: may merge series"))
    if chosen:
        shown = sorted({r.query for r in reads if r.shows_all and r.whole_series})
        out.removals.append(LabelRemoval(metric, tuple(chosen), tuple(stats[c].values for c in chosen),
                                         sum(stats[c].bytes for c in chosen), tuple(shown)))
