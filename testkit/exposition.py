"""Prometheus text exposition (format 0.0.4) of a workload subset, for a small scrape target.

All labels are exposed, `job` and `instance` too: they are what tells the nodes apart (and the
several `up` series), so a scraping Prometheus keeps them as `exported_job`/`exported_instance`
(or as they are with `honor_labels: true`).
"""

from __future__ import annotations

import math

from metricsgw.model import METRIC_NAME

_SUFFIXES = ("_bucket", "_sum", "_count")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)


def family_of(name: str, histograms: set[str]) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)]
    return name


def render(workload, t_ms: int, node_range: range) -> str:
    meta = {m.metric: m for m in workload.metadata()}
    histograms = {m.metric for m in meta.values() if m.type == "histogram"}
    values = workload.samples_at(t_ms)
    labels = workload.series()
    by_family: dict[str, list[int]] = {}
    for i in workload.series_of_nodes(node_range).tolist():
        name = dict(labels[i])[METRIC_NAME]
        by_family.setdefault(family_of(name, histograms), []).append(i)
    out: list[str] = []
    for family in sorted(by_family):
        m = meta.get(family)
        if m is not None:
            out.append(f"# HELP {family} {m.help}")
            out.append(f"# TYPE {family} {m.type}")
        for i in by_family[family]:
            name = ""
            pairs = []
            for n, v in labels[i]:
                if n == METRIC_NAME:
                    name = v
                else:
                    pairs.append(f'{n}="{_escape(v)}"')
            out.append(f"{name}{{{','.join(pairs)}}} {_fmt(float(values[i]))}")
    return "\n".join(out) + "\n"
