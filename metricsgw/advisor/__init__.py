"""``metricsgw advise``: which series nobody reads, and the relabel rules that would stop storing them.

``usage`` (PromQL -> the metrics and labels it reads), ``sources`` (dashboards, rule files, a query log ->
usage), ``counts`` (series counts and per-label statistics, and the gateway's API that gives them),
``propose`` (counts + usage -> proposals, pure), ``report`` (the text report and the relabel YAML),
``command`` (the command line). It proposes; it never applies anything.
"""
