"""``metricsgw advise``: which series nobody reads, and the relabel rules that would stop storing them.

``usage`` (PromQL -> the metrics and labels it reads), ``sources`` (dashboards, rule files, a query log ->
usage), ``counts`` (series counts and per-label statistics), ``propose`` (counts + usage -> proposals, pure),
``report`` (the text report, the JSON of /api/v1/status/advise and the relabel YAML), ``run`` (one run, given a
source of the counts: the command's and the gateway endpoint's), ``gateway`` (the command's source: the HTTP API)
and ``command`` (the command line). It proposes; it never applies anything.
"""
