"""The shipped alert and recording rules (rules/alerts/*.yml): valid for Prometheus and vmalert, documented, and
unit-tested with real `promtool test rules` (tests/alerts/*.test.yml), every rule by at least one firing case."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.shipped import ALERT_TEST_DIR, REPO, alert_rule_files, alert_rules, make_serve_rule_files

PROMTOOL = shutil.which("promtool")
VMALERT = shutil.which("vmalert")
TEST_FILES = sorted(ALERT_TEST_DIR.glob("*.test.yml"))
RULES = alert_rules()
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian prometheus) not installed")


def test_the_seed_workloads_have_rules():
    names = {r.name for r in RULES}
    assert {"GPUXidError", "GPUUncorrectableECCErrors", "GPUFallenOffBus", "GPUMissing", "DCGMExporterDown",
            "KubeAPIServer5xxRatioHigh", "KubeAPIServer429RatioHigh", "KubeAPIServerLatencyHigh",
            "EtcdRequestLatencyHigh", "namespace:iptables_internet_egress_bytes:rate5m",
            "MetricsgwDiscardingSamples", "MetricsgwGuardRejections", "MetricsgwWALWriteFailures",
            "MetricsgwFlushFailures", "MetricsgwCompactionFailures", "MetricsgwStorageNotWritable",
            "MetricsgwDiskAlmostFull", "MetricsgwDiskFillingUp"} <= names


def test_make_serve_loads_relabel_rules_only():
    loaded = make_serve_rule_files()
    assert loaded and all(p.parent.name == "relabel" for p in loaded), loaded
    assert not set(loaded) & set(alert_rule_files())


@pytest.mark.parametrize("rule", [r for r in RULES if r.kind == "alert"], ids=lambda r: r.name)
def test_alert_has_severity_and_annotations(rule):
    assert rule.labels.get("severity") in ("critical", "warning", "info"), rule.title
    for key in ("summary", "description", "runbook"):
        assert len(rule.annotations.get(key, "")) > 20, f"{rule.title}: annotation {key} missing or too short"
    assert "{{ $labels." in rule.annotations["summary"], f"{rule.title}: the summary should say where"


@needs_promtool
@pytest.mark.parametrize("path", alert_rule_files(), ids=lambda p: p.name)
def test_promtool_check_rules(path):
    res = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(path):
    res = subprocess.run([PROMTOOL, "test", "rules", path.name], cwd=path.parent, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_rule_is_unit_tested():
    """Each alert has a promtool case where it fires; each recording rule a case that checks its samples."""
    fired, recorded = set(), set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            fired |= {t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
            for t in case.get("promql_expr_test", []):
                if t.get("exp_samples"):
                    recorded |= set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", t["expr"]))
    missing = [r.title for r in RULES if r.name not in (fired if r.kind == "alert" else recorded)]
    assert not missing, f"rules without a promtool test case that fires/checks them: {missing}"


@pytest.mark.skipif(VMALERT is None, reason="vmalert (Debian victoria-metrics) not installed")
def test_vmalert_loads_the_rule_files():
    res = subprocess.run([VMALERT, "-dryRun", "-rule=" + str(REPO / "rules/alerts/*.yml")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    # and it would refuse a relabel file, so a dry run is a real check
    bad = subprocess.run([VMALERT, "-dryRun", "-rule=" + str(make_serve_rule_files()[0])], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0
