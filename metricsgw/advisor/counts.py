"""What is stored: series per metric and, for a few metrics, their series' label sets, from which each label's
distinct values and bytes are counted.

A listing the gateway truncated (a ``warnings`` entry, or fewer series than the count) is kept as truncated:
nothing is proved from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counts:
    series: dict[str, int]  # series per metric
    listed: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # each listed metric's series, complete
    truncated: set[str] = field(default_factory=set)  # metrics whose listing was cut


@dataclass(frozen=True)
class LabelStat:
    values: int  # distinct values over the metric's series
    bytes: int  # len(name) + len(value) summed over the series that have it


def label_stats(series: list[dict[str, str]]) -> dict[str, LabelStat]:
    values: dict[str, set[str]] = {}
    size: dict[str, int] = {}
    for labels in series:
        for name, value in labels.items():
            if name != "__name__":
                values.setdefault(name, set()).add(value)
                size[name] = size.get(name, 0) + len(name) + len(value)
    return {name: LabelStat(len(v), size[name]) for name, v in values.items()}


def distinct_without(series: list[dict[str, str]], dropped: set[str]) -> bool:
    """Whether the series stay distinct with the ``dropped`` labels removed."""
    kept = {tuple(sorted((k, v) for k, v in labels.items() if k not in dropped)) for labels in series}
    return len(kept) == len(series)
