"""Dashboards and alert/recording rules against the relabel rules `make serve` loads: every label they use survives.

The static check (tests/contract.py) needs no server; the dynamic halves run the same artefacts on a metricsgw
loaded with the workload (tests/dashboards/test_dashboards.py, tests/alerts/test_rules_on_metricsgw.py).
"""

from __future__ import annotations

import pytest

from tests.contract import check, dashboard_uses, probe_series, rule_uses
from tests.shipped import RELABEL_DIR, make_serve_rule_files


@pytest.fixture(scope="module")
def probes():
    return probe_series()


@pytest.fixture(scope="module")
def uses():
    return dashboard_uses() + rule_uses()


def test_uses_cover_every_dashboard_and_rule(uses):
    artefacts = {u.artefact.split(" ")[0].rstrip(":") for u in uses}
    assert {"dashboards/gpu-fleet.json", "dashboards/kube-apiserver.json", "dashboards/cluster-network.json",
            "dashboards/metricsgw.json", "rules/alerts/gpu.yml", "rules/alerts/kube-apiserver.yml",
            "rules/alerts/cluster-network.yml", "rules/alerts/metricsgw.yml"} <= artefacts
    gpu = [u for u in uses if u.artefact.startswith("dashboards/gpu-fleet.json panel 'Mean utilisation by node'")]
    assert gpu and all("Hostname" in u.labels for u in gpu)  # by (Hostname) and {{Hostname}}
    net = [u for u in uses if "'Internal traffic by node'" in u.artefact]
    assert net and all("instance" in u.labels and "node" not in u.labels for u in net)  # node is made by label_replace


def test_shipped_relabel_rules_keep_what_dashboards_and_rules_use(uses, probes):
    problems = check(make_serve_rule_files(), uses, probes)
    assert not problems, "\n".join(map(str, problems))


def _with_extra_rule(tmp_path, text: str):
    files = make_serve_rule_files()
    extra = tmp_path / "breaking.yml"
    extra.write_text(text)
    return files + [extra]


def test_deleting_hostname_is_reported_with_the_dashboard_and_the_alert(tmp_path, uses, probes):
    """The rule this issue started from: it must be caught, naming the panel, the alert and the rule."""
    files = _with_extra_rule(tmp_path, (
        "# Hostname repeats instance (the rule dcgm.yml used to ship)\n"
        '- source_labels: [__name__]\n  regex: "DCGM_FI_.+"\n  target_label: Hostname\n  replacement: ""\n'))
    report = [str(p) for p in check(files, uses, probes)]
    text = "\n".join(report)
    assert "dashboards/gpu-fleet.json variable $Hostname" in text
    assert "dashboards/gpu-fleet.json panel 'Mean utilisation by node' (A): needs label 'Hostname'" in text
    assert "rules/alerts/gpu.yml: alert GPUXidError: needs label 'Hostname'" in text
    assert "rules/alerts/gpu.yml: alert GPUMissing: needs label 'Hostname'" in text
    assert all('breaking.yml rule 1 "# Hostname repeats instance' in line for line in report), text
    # every GPU panel filters on $Hostname (a picked node would match nothing); other dashboards are not blamed
    assert "dashboards/gpu-fleet.json panel 'GPUs reporting' (A): needs label 'Hostname'" in text
    assert "kube-apiserver.json" not in text and "cluster-network.json" not in text and "GPUUncorrectable" in text


def test_dropping_series_is_reported_with_the_dashboard_and_the_alert(tmp_path, uses, probes):
    files = _with_extra_rule(tmp_path, (
        "# 5xx counters are rare, drop them (a bad idea)\n"
        '- source_labels: [__name__, code]\n  regex: "apiserver_request_total;5.."\n  action: drop\n'))
    text = "\n".join(map(str, check(files, uses, probes)))
    assert ("dashboards/kube-apiserver.json panel '5xx ratio' (A): "
            'apiserver_request_total{instance=~".*", verb=~".*", resource=~".*", code=~"5.."} selects nothing') in text
    assert "rules/alerts/kube-apiserver.yml: alert KubeAPIServer5xxRatioHigh: apiserver_request_total" in text
    assert 'breaking.yml rule 1 "# 5xx counters are rare' in text
    assert "429" not in text  # the 429 panels and alert still have their series


def test_removing_a_matched_label_value_is_reported(tmp_path, uses, probes):
    """Relabelling a value a query matches on (traffic="internet") breaks it as surely as dropping the series."""
    files = _with_extra_rule(tmp_path, (
        "# call it external\n"
        '- source_labels: [traffic]\n  regex: "internet"\n  target_label: traffic\n  replacement: external\n'))
    text = "\n".join(map(str, check(files, uses, probes)))
    assert "rules/alerts/cluster-network.yml: record namespace:iptables_internet_egress_bytes:rate5m" in text
    assert "dashboards/cluster-network.json panel 'Internet egress by namespace' (A)" in text


def test_the_relabel_directory_is_what_make_serve_loads():
    assert sorted(make_serve_rule_files()) == sorted(RELABEL_DIR.glob("*.yml"))
