"""What is stored: series per metric (``/api/v1/status/tsdb``) and, for a few metrics, their series' label sets
(``/api/v1/series``), from which each label's distinct values and bytes are counted.

A listing the gateway truncated (a ``warnings`` entry, or fewer series than the count) is kept as truncated:
nothing is proved from it. One call for the counts and one per listed metric, no more.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request
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


class Gateway:
    """The gateway's Prometheus API, with basic auth when given."""

    def __init__(self, url: str, user: str | None = None, password: str | None = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Accept": "application/json"}
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"

    def _get(self, path: str, params: list[tuple[str, str]]) -> dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(urllib.request.Request(url, headers=self.headers), timeout=self.timeout) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise OSError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body

    def series_counts(self, limit: int) -> dict[str, int]:
        data = self._get("/api/v1/status/tsdb", [("limit", str(limit))])["data"]
        return {e["name"]: int(e["value"]) for e in data.get("seriesCountByMetricName", [])}

    def list_series(self, counts: Counts, metrics: list[str], limit: int) -> None:
        """Lists each metric's series into ``counts`` (``listed`` or ``truncated``)."""
        for metric in metrics:
            body = self._get("/api/v1/series", [("match[]", metric), ("limit", str(limit))])
            found = body["data"]
            if body.get("warnings") or len(found) < counts.series.get(metric, 0):
                counts.truncated.add(metric)
            else:
                counts.listed[metric] = found
