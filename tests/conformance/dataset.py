"""The differential corpus's data, placed three ways in one store: only in the table, across the boundary
between table and head, only in the head.

One dataset (the bench workload's 1 GPU node and 1 control-plane node, its apiserver/etcd histograms thinned
to two resources; plus test_differential.py's edge-case series: staleness, NaN, resets, jitter), 40 minutes
at 15 s, is written three times, at three times far enough apart (PLACEMENTS) that no query of the corpus
around one copy reaches another (the widest reach is ``offset 1h`` and ``[30m]``). The copies are the same
series, so a series is sent in time order: the table copy and the first half of the boundary copy, then a
restart of the gateways (each flushes its head on SIGTERM), then the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metricsgw.model import canonical
from tests.dashboards.loading import INTERVAL_MS, SmallControlPlaneWorkload
from tests.e2e.test_differential import edge_case_series

SCRAPES = 161  # 40 minutes at 15 s (the edge cases are laid out for 40 minutes)
# placement -> how long before the newest sample its copy ends
PLACEMENTS = {"table": 16 * 3600_000, "boundary": 8 * 3600_000, "head": 0}
THINNED = {"resource": {"pods", "nodes"}, "type": {"*core.Pods", "*core.Nodes"}}


@dataclass
class Copy:
    placement: str
    start_ms: int
    end_ms: int
    series: list[tuple]  # (labels, t_ms, values)

    def cut(self, before: bool) -> list[tuple]:
        """Its samples up to the middle (``before``), or after it."""
        mid = (self.start_ms + self.end_ms) // 2
        out = []
        for labels, t, v in self.series:
            keep = (t <= mid) if before else (t > mid)
            if keep.any():
                out.append((labels, t[keep], v[keep]))
        return out


def copies(now_ms: int) -> dict[str, Copy]:
    return {p: _copy(p, now_ms - ago) for p, ago in PLACEMENTS.items()}


def _copy(placement: str, end_ms: int) -> Copy:
    start_ms = end_ms - (SCRAPES - 1) * INTERVAL_MS
    workload = SmallControlPlaneWorkload(1, seed=3)
    t = np.arange(start_ms, end_ms + 1, INTERVAL_MS, dtype=np.int64)
    values = np.stack([workload.samples_at(int(x)) for x in t], axis=1)  # [series, scrape]
    series = [(labels, t, values[i]) for i, labels in enumerate(workload.series()) if _kept(labels)]
    for labels, samples in edge_case_series(start_ms, end_ms):
        ts, vs = zip(*samples)
        series.append((canonical(labels), np.array(ts, np.int64), np.array(vs, np.float64)))
    return Copy(placement, start_ms, end_ms, series)


def _kept(labels) -> bool:
    d = dict(labels)
    return all(d[k] in values for k, values in THINNED.items() if k in d)


def before_restart(cs: dict[str, Copy]) -> list[tuple]:
    return cs["table"].series + cs["boundary"].cut(before=True)


def after_restart(cs: dict[str, Copy]) -> list[tuple]:
    return cs["boundary"].cut(before=False) + cs["head"].series
