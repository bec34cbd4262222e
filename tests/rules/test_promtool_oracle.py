"""Validation agrees with real Prometheus: promtool (2.42) accepts exactly the configs we accept."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from metricsgw.rules.loader import parse_rule_text
from metricsgw.rules.relabel import RuleError

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")

CONFIGS = [
    dict(source_labels=["a"], target_label="b"),
    dict(target_label="b-c"),
    dict(target_label="${1}x", regex="(.*)"),
    dict(target_label="-${1}"),
    dict(action="hashmod", target_label="h"),
    dict(action="hashmod", target_label="h", modulus=8, source_labels=["a"]),
    dict(action="lowercase", target_label="l", replacement="x"),
    dict(action="uppercase", source_labels=["a"], target_label="u"),
    dict(action="keepequal", source_labels=["a"], target_label="b"),
    dict(action="keepequal", source_labels=["a"], target_label="b", regex="(.*)"),
    dict(action="dropequal", source_labels=["a"], target_label="b", separator=";"),
    dict(action="labeldrop", regex="pod_uid|container_id"),
    dict(action="labeldrop", regex="x", source_labels=["a"]),
    dict(action="labelkeep", regex="x", separator=","),
    dict(action="labelmap", regex="__meta_(.*)", replacement="$1"),
    dict(action="labelmap", regex="(.*)", replacement="-$1"),
    dict(action="Drop", source_labels=["__name__"], regex="go_.*"),
    dict(action="nope"),
    dict(action="drop", regex="(unclosed"),
    dict(action="drop", source_labels=["bad-label"]),
    dict(action="replace", target_label="x", replacement=""),
    dict(action="drop", regex=""),
]


def promtool_accepts(rule: dict, tmp_path) -> bool:
    cfg = {"scrape_configs": [{"job_name": "x", "static_configs": [{"targets": ["a:1"]}],
                               "metric_relabel_configs": [rule]}]}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([PROMTOOL, "check", "config", "--syntax-only", str(path)],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


@pytest.mark.parametrize("rule", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_same_verdict_as_promtool(rule, tmp_path):
    try:
        parse_rule_text(yaml.safe_dump([rule]), "t.yml")
        ours = True
    except RuleError:
        ours = False
    assert ours == promtool_accepts(rule, tmp_path)
