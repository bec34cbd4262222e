"""Merging the JSON a process answers ``?scope=head`` with on the exemplars and metadata APIs. Pure.

What a query process needs from the processes holding writes in memory, beside their recent samples (remote
read, peers.py), comes over the same API as a user's call with ``?scope=head`` (docs/cluster.md):
- ``/api/v1/query_exemplars?scope=head``: the exemplars of the process's heads (not yet in the table), in
  the API's own shape; merged with the table's by series, one exemplar per (series, timestamp), the first
  part given wins (the local read, as for samples), series in label order, exemplars in time order;
- ``/api/v1/metadata?scope=head``: every metadata entry the writer holds (all of it is in memory), without
  ``limit``; merged per metric, entries in the order first seen, metrics sorted, then ``limit`` applied;
- ``/api/v1/labels?scope=head`` and ``/api/v1/label/<name>/values?scope=head``: the names or values of the
  writer's own series (flushed or not) in the window, sorted, the first ``limit``; merged as a sorted union
  (the first N of a union are among the first N of each part, so the asker's cut stays exact).
The front answers these for a whole gateway by merging its shards' answers with the same functions
(gateway_head.py), so a gateway on another machine asks the front once.
"""

from __future__ import annotations

def merge_exemplars(parts: list[list[dict]]) -> list[dict]:
    by_series: dict[tuple, dict[object, dict]] = {}
    for part in parts:
        for entry in part:
            key = tuple(sorted(entry["seriesLabels"].items()))
            held = by_series.setdefault(key, {})
            for ex in entry["exemplars"]:
                held.setdefault(ex["timestamp"], ex)  # one per (series, t): the first part's
    return [{"seriesLabels": dict(key), "exemplars": [held[t] for t in sorted(held)]}
            for key, held in sorted(by_series.items())]


def merge_names(parts: list[list[str]]) -> list[str]:
    return sorted(set().union(*parts))


def merge_metadata(parts: list[dict[str, list[dict]]], limit: int | None = None) -> dict[str, list[dict]]:
    merged: dict[str, dict[tuple, dict]] = {}
    for part in parts:
        for metric, entries in part.items():
            held = merged.setdefault(metric, {})
            for e in entries:
                held.setdefault((e["type"], e["help"], e["unit"]), e)
    names = sorted(merged)
    if limit is not None and limit > 0:
        names = names[:limit]
    return {n: list(merged[n].values()) for n in names}
