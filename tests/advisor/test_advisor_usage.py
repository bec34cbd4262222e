"""The advisor's usage extraction over the shipped dashboards and rule files, and over PromQL it must read right."""

from __future__ import annotations

import json

from metricsgw.advisor.sources import dashboard_usage, query_log_usage, rule_file_usage, substitute
from metricsgw.advisor.usage import expr_usage
from tests.shipped import REPO, alert_rule_files

DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))


def test_every_shipped_dashboard_and_rule_parses():
    for path in DASHBOARDS:
        usage = dashboard_usage(str(path))
        assert usage.reads and not usage.unparsed, (path, usage.unparsed)
    for path in alert_rule_files():
        usage = rule_file_usage(str(path))
        assert usage.reads and not usage.unparsed, (path, usage.unparsed)


def test_the_gpu_fleet_dashboard_reads_its_dcgm_metrics_and_labels():
    usage = dashboard_usage(str(REPO / "dashboards" / "gpu-fleet.json"))
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                   "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"):
        assert usage.is_read(metric), metric
    assert not usage.is_read("DCGM_FI_PROF_PIPE_FP64_ACTIVE")  # dropped by rules/relabel/dcgm.yml: no panel has it
    util = set().union(*(r.labels for r in usage.of("DCGM_FI_DEV_GPU_UTIL")))
    assert {"Hostname", "namespace", "gpu"} <= util  # the variables' matchers and label_values
    assert "device" not in util
    variable = [r for r in usage.of("DCGM_FI_DEV_GPU_UTIL") if r.query == "gpu-fleet.json variable $gpu"]
    assert variable and not variable[0].shows_all  # label_values shows only the label it lists


def test_the_gpu_alerts_read_hostname():
    usage = rule_file_usage(str(REPO / "rules" / "alerts" / "gpu.yml"))
    assert usage.is_read("DCGM_FI_DEV_XID_ERRORS")
    assert "Hostname" in set().union(*(r.labels for r in usage.of("DCGM_FI_DEV_XID_ERRORS")))


def test_grafana_variables_are_substituted():
    assert substitute('rate(x{node=~"$node", a="${a:regex}"}[$__rate_interval])', {}) == \
        'rate(x{node=~".*", a=".*"}[5m])'
    assert substitute("max_over_time(x[$__range]) / [[w]]", {"w": "2"}) == "max_over_time(x[1h]) / 2"


def test_what_an_expression_reads():
    usage = expr_usage("q", 'sum by (a) (rate(x{b="1"}[5m])) / on (c) group_left (d) '
                            'label_replace(y, "n", "$1", "instance", "(.*)")')
    x, y = usage.of("x"), usage.of("y")
    assert x[0].labels == {"a", "b", "c", "d"} and not x[0].shows_all
    assert y[0].labels == {"c", "d", "instance"} and y[0].shows_all
    regex = expr_usage("q", '{__name__=~"node_.+"}')
    assert regex.is_read("node_load1") and not regex.is_read("up")


def test_an_expression_that_does_not_parse_is_reported():
    usage = expr_usage("panel", "sum(rate(x[$window]))")
    assert not usage.reads and usage.unparsed[0].query == "panel" and "parse error" in usage.unparsed[0].error


def test_label_values_of_a_bare_label_reads_no_metric(tmp_path):
    var = {"type": "query", "name": "job", "query": "label_values(job)"}
    (tmp_path / "d.json").write_text(json.dumps({"templating": {"list": [var]}, "panels": []}))
    usage = dashboard_usage(str(tmp_path / "d.json"))
    assert not usage.is_read("up") and usage.of("up")[0].labels == {"job"}


def test_the_query_log(tmp_path):
    log = tmp_path / "q.log"
    lines = [{"params": {"query": "sum(rate(a_total[5m]))"}}, {"params": {"query": "sum(rate(a_total[5m]))"}},
             {"params": {"query": "b{"}}]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    usage = query_log_usage(str(log))
    assert usage.is_read("a_total") and len(usage.of("a_total")) == 1
    assert [u.query for u in usage.unparsed] == ["q.log line 4", "q.log line 3"]
