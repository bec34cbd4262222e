"""The advisor's output: a report for people and the proposed relabel rules as a ``--rules.file`` YAML.

A label is removed from one metric's series with a replace to "" scoped by ``__name__`` (as rules/relabel/dcgm.yml
does): a ``labeldrop`` would remove it from every metric, read or not.
"""

from __future__ import annotations

import json

from .counts import Counts
from .propose import Proposals
from .usage import Usage

_SHOWN = 20  # names listed per section of the report; the YAML has them all


def relabel_yaml(p: Proposals) -> str:
    lines = ["# Proposed by `metricsgw advise`: review, then load with --rules.file (check with `metricsgw check relabel`)."]
    if p.drops:
        lines += [f"# {len(p.drops)} metrics with {p.dropped_series} series that no dashboard, rule or logged query reads.",
                  "- source_labels: [__name__]",
                  f"  regex: {json.dumps('|'.join(m for m, _ in p.drops))}",
                  "  action: drop"]
    for r in p.removals:
        for label, values in zip(r.labels, r.values):
            rule = ["- source_labels: [__name__]", f"  regex: {json.dumps(r.metric)}", f"  target_label: {label}",
                    '  replacement: ""']
            lines.append(f"# {label} ({values} values) on {r.metric}: no query of it reads it; its series stay distinct.")
            if r.safe:
                lines += rule
            else:  # a legend or table would lose the label: the user decides
                lines.append(f"# Not applied: it changes the output of {len(r.queries)} queries (the report names them). "
                             "Uncomment to apply.")
                lines += [f"# {line}" for line in rule]
    if not p.drops and not any(r.safe for r in p.removals):
        lines.append("[]")
    return "\n".join(lines) + "\n"


def text_report(counts: Counts, usage: Usage, p: Proposals, min_series: int) -> str:
    total = sum(counts.series.values())
    out = [f"{len(counts.series)} metrics, {total} series; {len(usage.queries())} queries read "
           f"{sum(1 for m in counts.series if usage.is_read(m))} of them."]
    everything = sorted({r.query for r in usage.reads if r.whole_series and not r.names})
    if everything:
        out.append(f"These select series without a metric name, so every metric counts as read: {', '.join(everything)}")
    if usage.unparsed:
        out.append(f"\nNot understood ({len(usage.unparsed)}; the metrics they read are not counted):")
        out += [f"  {u.query}: {u.error}" + (f"\n    {u.expr}" if u.expr else "") for u in usage.unparsed]
    out.append(f"\nDrop: {len(p.drops)} unread metrics with >= {min_series} series, saving {p.dropped_series} series "
               f"({p.small_unread} smaller unread metrics left alone); no query changes.")
    out += [f"  {n:>10}  {m}" for m, n in p.drops[:_SHOWN]]
    if len(p.drops) > _SHOWN:
        out.append(f"  ... and {len(p.drops) - _SHOWN} more (all in the YAML)")
    out.append(f"\nRemove labels: {len(p.removals)} metrics (series stay distinct, so 0 series saved; the bytes are "
               "the label text the series carry).")
    for r in p.removals:
        labels = ", ".join(f"{label} ({v} values)" for label, v in zip(r.labels, r.values))
        verdict = "no query changes" if r.safe else (f"changes {len(r.queries)} queries' output, so it is written "
                                                      "commented out")
        out.append(f"  {r.metric}: {labels}; {r.bytes} bytes; {verdict}" + "".join(f"\n    {q}" for q in r.queries))
    if p.unsafe:
        out.append("\nNot proposed:")
        out += [f"  {u.metric}{' ' + u.label if u.label else ''}: {u.reason}" for u in p.unsafe]
    return "\n".join(out) + "\n"


def advice_json(counts: Counts, usage: Usage, p: Proposals, min_series: int) -> dict:
    """The report as /api/v1/status/advise answers it: the same figures as ``text_report``, and the YAML."""
    return {
        "metrics": len(counts.series), "series": sum(counts.series.values()),
        "queries": len(usage.queries()), "readMetrics": sum(1 for m in counts.series if usage.is_read(m)),
        "minSeries": min_series,
        "everyMetricRead": sorted({r.query for r in usage.reads if r.whole_series and not r.names}),
        "unparsed": [{"query": u.query, "expr": u.expr, "error": u.error} for u in usage.unparsed],
        "drops": [{"metric": m, "series": n} for m, n in p.drops],
        "droppedSeries": p.dropped_series, "smallUnread": p.small_unread,
        "labelRemovals": [{"metric": r.metric, "labels": list(r.labels), "values": list(r.values), "bytes": r.bytes,
                           "changedQueries": list(r.queries), "applied": r.safe} for r in p.removals],
        "notProposed": [{"metric": u.metric, "label": u.label, "reason": u.reason} for u in p.unsafe],
        "relabelRules": relabel_yaml(p),
    }
