"""A deterministic GPU-cluster workload: series label sets plus vectorised values at any time.

``Workload(nodes, seed)`` describes N GPU nodes (DCGM, node-exporter, iptables exporter) and
three control-plane nodes (kube-apiserver, etcd histograms). Same ``nodes`` and ``seed`` give
byte-identical series and values. Values are pure functions of (series, t): nothing is
stateful, so a load driver can ask for any timestamp in any order.

Value models (every parameter drawn once, per series, from the seeded generator):
- gauge:   base + amp*sin(2*pi*t/period + phase) + noise, clipped, optionally integer;
           optional rare "events" (e.g. an XID code) that hold for a 10-minute window.
- counter: rate*elapsed + wobble*sin(w*elapsed), with wobble <= rate/w so it never decreases;
           elapsed restarts when the exporter of that (node, job) restarts (occasional resets).
- histogram: one counter per family gives _count; bucket = floor(count * CDF(le)), so buckets
           are cumulative in `le`, monotone in time and `+Inf` == `_count`; _sum = count * mean.
- mirror:  total - another series (FB_FREE = framebuffer total - FB_USED).

Pod churn: a pod's series (DCGM of its GPUs, its iptables rules) name it in `pod` (and a rule's `comment`).
``series(generations)`` gives the label sets once the pods of namespace i have been replaced
``generations[i]`` times: each pod slot then holds a pod of that generation (same length of name,
``workload_catalog.pod_name``), i.e. new series; values stay a function of the series' position.
"""

from __future__ import annotations

import math

import numpy as np

from metricsgw.model import Labels, MetricMetadata
from testkit import workload_catalog
from testkit.series_builder import COUNTER, GAUGE, MIRROR, SeriesBuilder

_WOBBLE_W = 2 * math.pi / 600.0  # counters speed up and slow down over a 10-minute cycle
_EVENT_WINDOW_MS = 600_000

def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-spread hash of uint64 arrays (wraps on purpose)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _unit(h: np.ndarray) -> np.ndarray:
    """uint64 hash -> float64 in [0, 1)."""
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class Workload:
    """N GPU nodes + 3 control-plane nodes. See the module docstring for the value models."""

    CONTROL_PLANE_NODES = 3

    def __init__(self, nodes: int, seed: int = 0) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.nodes = nodes
        self.seed = seed
        b = SeriesBuilder(np.random.default_rng([seed, nodes]))
        self.hostnames = workload_catalog.build(b, nodes, self.CONTROL_PLANE_NODES)
        pods = np.asarray(b.pods, np.int64).reshape(-1, 4)
        self.pod_namespace = pods[:, 0].astype(np.int8)  # index into NAMESPACES, per pod
        self._pod_hash, self._pod_node, self._pod_slot = pods[:, 1], pods[:, 2], pods[:, 3]
        self.pod_of = np.asarray(b.pod, np.int32)  # per series: its pod, -1 for none
        self._labels = b.labels
        self._meta = list(b.meta.values())
        self._compile(b, seed)

    def _compile(self, b: SeriesBuilder, seed: int) -> None:
        f64 = lambda xs: np.asarray(xs, np.float64)  # noqa: E731
        self.node_of = np.asarray(b.node, np.int32)
        kind = np.asarray(b.kind, np.int8)
        self._gi = np.flatnonzero(kind == GAUGE)
        self._ci = np.flatnonzero(kind == COUNTER)
        self._mi = np.flatnonzero(kind == MIRROR)
        g = {k: np.asarray(v)[self._gi] for k, v in b.g.items()}
        self._g_base, self._g_amp = f64(g["base"]), f64(g["amp"])
        self._g_omega = 2 * math.pi / f64(g["period"])
        self._g_phase, self._g_noise = f64(g["phase"]), f64(g["noise"])
        self._g_lo, self._g_hi = f64(g["lo"]), f64(g["hi"])
        self._g_int = np.asarray(g["integer"], bool)
        self._g_ev_p, self._g_ev_v = f64(g["ev_p"]), f64(g["ev_v"])
        self._c_fam = np.asarray(b.fam, np.int64)[self._ci]
        self._c_mult = f64(b.mult)[self._ci]
        self._c_floor = np.asarray(b.floor, bool)[self._ci]
        self._m_of = np.asarray(b.mirror_of, np.int64)[self._mi]
        self._m_total = f64(b.mirror_total)[self._mi]
        rate = f64(b.f_rate)
        self._f_rate = rate
        self._f_wobble = f64(b.f_wobble) * rate / _WOBBLE_W  # amplitude <= rate/w keeps it monotone
        grp = np.asarray(b.f_group, np.int64)
        self._f_period = np.asarray(b.grp_period_ms, np.int64)[grp]
        self._f_offset = np.asarray(b.grp_offset_ms, np.int64)[grp]
        self._f_int = np.asarray(b.f_integer, bool)
        # a per-series hash key: noise depends on (seed, series position, time) only
        idx = np.arange(len(b.labels), dtype=np.uint64)
        self._key = _mix64(idx ^ _mix64(np.full(len(idx), seed & 0xFFFFFFFFFFFFFFFF, np.uint64)))

    # -- public API ----------------------------------------------------------------------------
    def series(self, generations=None) -> list[Labels]:
        """Every series' labels; with ``generations`` (per namespace), its pods replaced that many times."""
        if not generations or not any(generations):
            return self._labels
        out = list(self._labels)
        for i in np.flatnonzero(self.pod_of >= 0).tolist():
            pod = int(self.pod_of[i])
            g = generations[self.pod_namespace[pod]]
            if g:
                old, new = self.pod_name(pod), self.pod_name(pod, g)
                out[i] = tuple((n, v.replace(old, new)) for n, v in out[i])
        return out

    @property
    def num_series(self) -> int:
        return len(self._key)

    @property
    def namespaces(self) -> tuple[str, ...]:
        return workload_catalog.NAMESPACES

    def pod_name(self, pod: int, generation: int = 0) -> str:
        return workload_catalog.pod_name(self.namespaces[self.pod_namespace[pod]], int(self._pod_hash[pod]),
                                         int(self._pod_node[pod]), int(self._pod_slot[pod]), generation)

    def pod_generation(self, pod: int, name: str) -> int | None:
        """Which generation of pod slot `pod` is named `name` (None: none of them)."""
        parts = name.split("-")
        try:
            h = int(parts[1], 16)
        except (IndexError, ValueError):
            return None
        bits = workload_catalog.POD_HASH_BITS
        inverse = pow(workload_catalog.POD_GENERATION_STEP, -1, 1 << bits)
        g = ((h - int(self._pod_hash[pod])) * inverse) & ((1 << bits) - 1)
        return g if self.pod_name(pod, g) == name else None

    def address(self, node: int) -> str:
        """The IP address in node `node`'s `instance` labels."""
        return workload_catalog.node_ip(node, self.nodes)

    def metadata(self) -> list[MetricMetadata]:
        return list(self._meta)

    def family_counts(self, t_ms: int) -> np.ndarray:
        """Counter family values at t (before per-series multipliers)."""
        elapsed_s = ((np.int64(t_ms) - self._f_offset) % self._f_period).astype(np.float64) / 1000.0
        c = self._f_rate * elapsed_s + self._f_wobble * np.sin(_WOBBLE_W * elapsed_s)
        return np.where(self._f_int, np.floor(c), c)

    def samples_at(self, t_ms: int) -> np.ndarray:
        """One float64 per series (in ``series()`` order) at time t_ms; vectorised, stateless."""
        t_ms = int(t_ms)
        out = np.empty(self.num_series, np.float64)
        # gauges
        key = self._key[self._gi]
        u = _unit(_mix64(key ^ _mix64(np.full(len(key), t_ms // 1000, np.uint64))))
        g = self._g_base + self._g_amp * np.sin(self._g_omega * (t_ms / 1000.0) + self._g_phase)
        g += self._g_noise * (2.0 * u - 1.0)
        g = np.clip(g, self._g_lo, self._g_hi)
        g = np.where(self._g_int, np.round(g), g)
        ev = _unit(_mix64(key + _mix64(np.full(len(key), t_ms // _EVENT_WINDOW_MS + 7, np.uint64))))
        out[self._gi] = np.where(ev < self._g_ev_p, self._g_ev_v, g)
        # counters and histogram parts
        c = self.family_counts(t_ms)[self._c_fam] * self._c_mult
        out[self._ci] = np.where(self._c_floor, np.floor(c), c)
        # mirrors (their sources are gauges or counters, already filled in)
        out[self._mi] = self._m_total - out[self._m_of]
        return out

    def drop_labels(self) -> None:
        """Forget the label sets (a driver that has encoded them keeps only the values model: smaller to pickle)."""
        self._labels = []

    def series_of_nodes(self, node_range: range) -> np.ndarray:
        """Indices of the series belonging to nodes in node_range (GPU nodes first, then control plane)."""
        return np.flatnonzero((self.node_of >= node_range.start) & (self.node_of < node_range.stop))

    def exposition(self, t_ms: int, node_range: range) -> str:
        from testkit.exposition import render

        return render(self, t_ms, node_range)
