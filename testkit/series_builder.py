"""The columns a workload's series are collected into, one series at a time, while the catalog of series
templates (workload_catalog.py) is walked; Workload (workload.py) compiles them into its arrays."""

from __future__ import annotations

import math

import numpy as np

from metricsgw.model import Labels, MetricMetadata, canonical

GAUGE, COUNTER, MIRROR = 0, 1, 2  # a series' kind: its value model (workload.py's docstring)


class SeriesBuilder:
    """Collects series one by one (only at construction time) into column lists."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.labels: list[Labels] = []
        self.node: list[int] = []
        self.kind: list[int] = []
        # gauge columns
        self.g = {k: [] for k in ("base", "amp", "period", "phase", "noise", "lo", "hi", "integer", "ev_p", "ev_v")}
        # counter-derived columns
        self.fam: list[int] = []
        self.mult: list[float] = []
        self.floor: list[bool] = []
        self.mirror_of: list[int] = []
        self.mirror_total: list[float] = []
        # counter families and reset groups
        self.f_rate: list[float] = []
        self.f_wobble: list[float] = []
        self.f_group: list[int] = []
        self.f_integer: list[bool] = []
        self.grp_period_ms: list[int] = []
        self.grp_offset_ms: list[int] = []
        self.meta: dict[str, MetricMetadata] = {}
        self.current_node = 0
        # pods: (namespace index, name hash, node, slot) per pod; each series' pod (-1: none), set while a pod's
        # series are added (their `pod` label, and an iptables rule's comment, name it)
        self.pods: list[tuple[int, int, int, int]] = []
        self.pod: list[int] = []
        self.current_pod = -1

    # -- registration ------------------------------------------------------------------------
    def describe(self, family: str, type_: str, help_: str) -> None:
        if family not in self.meta:
            self.meta[family] = MetricMetadata(family, type_, help_)

    def reset_group(self, mean_uptime_h: float) -> int:
        """An exporter process: all its counters reset together when it restarts."""
        short = self.rng.random() < 0.3  # some exporters restart often (crash loops, upgrades)
        hours = self.rng.uniform(0.5, 6.0) if short else self.rng.uniform(0.5, 2.0) * mean_uptime_h
        period = int(hours * 3_600_000)
        self.grp_period_ms.append(period)
        self.grp_offset_ms.append(int(self.rng.integers(0, period)))
        return len(self.grp_period_ms) - 1

    def family(self, rate: float, group: int, integer: bool) -> int:
        self.f_rate.append(max(rate, 0.0))
        self.f_wobble.append(float(self.rng.uniform(0.0, 0.8)))
        self.f_group.append(group)
        self.f_integer.append(integer)
        return len(self.f_rate) - 1

    def _add(self, pairs, kind: int) -> int:
        self.labels.append(canonical(pairs))
        self.node.append(self.current_node)
        self.pod.append(self.current_pod)
        self.kind.append(kind)
        return len(self.labels) - 1

    def _gauge_cols(self, base=0.0, amp=0.0, period=3600.0, noise=0.0, lo=-math.inf, hi=math.inf,
                    integer=False, ev_p=0.0, ev_v=0.0) -> None:
        g = self.g
        g["base"].append(base); g["amp"].append(amp); g["period"].append(period)
        g["phase"].append(float(self.rng.uniform(0, 2 * math.pi))); g["noise"].append(noise)
        g["lo"].append(lo); g["hi"].append(hi); g["integer"].append(integer)
        g["ev_p"].append(ev_p); g["ev_v"].append(ev_v)

    def _counter_cols(self, fam=-1, mult=1.0, floor=False, mirror_of=-1, mirror_total=0.0) -> None:
        self.fam.append(fam); self.mult.append(mult); self.floor.append(floor)
        self.mirror_of.append(mirror_of); self.mirror_total.append(mirror_total)

    def gauge(self, pairs, **params) -> int:
        i = self._add(pairs, GAUGE)
        self._gauge_cols(**params)
        self._counter_cols()
        return i

    def counter(self, pairs, rate: float, group: int, integer: bool = True) -> int:
        fam = self.family(rate, group, integer)
        return self.derived(pairs, fam)

    def derived(self, pairs, fam: int, mult: float = 1.0, floor: bool = False) -> int:
        """A series whose value is family count * mult (histogram bucket/_sum/_count, counters)."""
        i = self._add(pairs, COUNTER)
        self._gauge_cols()
        self._counter_cols(fam=fam, mult=mult, floor=floor)
        return i

    def mirror(self, pairs, of: int, total: float) -> int:
        i = self._add(pairs, MIRROR)
        self._gauge_cols()
        self._counter_cols(mirror_of=of, mirror_total=total)
        return i
