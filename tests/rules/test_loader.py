"""Rule files: errors name file/index/reason; a bad reload keeps the last good rules; check output."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from metricsgw.model import canonical
from metricsgw.rules import check
from metricsgw.rules.loader import RuleHolder, load_rule_files
from metricsgw.rules.relabel import RuleError
from metricsgw.telemetry import Telemetry

RULES = Path(__file__).resolve().parents[2] / "rules"

GOOD = """
# drop Go runtime noise
- source_labels: [__name__]
  regex: go_.*
  action: drop
- regex: pod_uid
  action: labeldrop
"""
BAD = """
- source_labels: [__name__]
  regex: go_.*
  action: drop
- action: hashmod
  target_label: shard
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_load_files_in_order(tmp_path):
    a = write(tmp_path, "a.yml", GOOD)
    b = write(tmp_path, "b.yml", "- target_label: env\n  replacement: prod\n")
    rules = load_rule_files([a, b])
    assert len(rules) == 3 and rules.sources == (a, a, b)
    assert rules.apply(canonical({"__name__": "go_goroutines"}.items())) is None
    assert rules.apply(canonical({"__name__": "up", "pod_uid": "1"}.items())) == (("__name__", "up"), ("env", "prod"))


def test_error_names_file_index_reason(tmp_path):
    bad = write(tmp_path, "bad.yml", BAD)
    with pytest.raises(RuleError) as err:
        load_rule_files([write(tmp_path, "ok.yml", GOOD), bad])
    assert str(err.value) == f"{bad}: rules[1]: relabel configuration for hashmod requires non-zero modulus"


@pytest.mark.parametrize("text,reason", [
    ("- [unclosed\n", "yaml:"),
    ("action: drop\n", "must be a YAML list"),
    ("- action: drop\n  action: keep\n", "already defined"),
    ("- 42\n", "must be a mapping"),
])
def test_file_level_errors(tmp_path, text, reason):
    with pytest.raises(RuleError, match=reason):
        load_rule_files([write(tmp_path, "x.yml", text)])


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(RuleError, match="cannot read"):
        load_rule_files([str(tmp_path / "nope.yml")])
    assert len(load_rule_files([write(tmp_path, "empty.yml", "# nothing yet\n")])) == 0


def test_reload_keeps_last_good(tmp_path):
    tel = Telemetry()
    path = write(tmp_path, "r.yml", GOOD)
    holder = RuleHolder([path], tel)
    before = holder.current
    assert holder.generation == 0 and len(before) == 2
    assert tel.rules_reload_success._value.get() == 1 and tel.rules_loaded._value.get() == 2

    write(tmp_path, "r.yml", BAD)
    ok, msg = holder.reload()
    assert not ok and "rules[1]" in msg and "keeping the previous rules" in msg
    assert holder.current is before and holder.generation == 0
    assert tel.rules_reload_success._value.get() == 0

    write(tmp_path, "r.yml", GOOD + "- target_label: env\n  replacement: prod\n")
    ok, msg = holder.reload()
    assert ok and "3 relabel rules" in msg
    assert holder.generation == 1 and len(holder.current) == 3
    assert tel.rules_reload_success._value.get() == 1 and tel.rules_loaded._value.get() == 3


def test_holder_start_up_with_bad_file_is_fatal(tmp_path):
    with pytest.raises(RuleError):
        RuleHolder([write(tmp_path, "r.yml", BAD)])


def test_check_output_and_exit_code(tmp_path):
    good, bad = write(tmp_path, "good.yml", GOOD), write(tmp_path, "bad.yml", BAD)
    out, err = io.StringIO(), io.StringIO()
    assert check.main([good], out, err) == 0
    assert out.getvalue() == f"Checking {good}\n  SUCCESS: 2 rules found\n\n" and err.getvalue() == ""

    out, err = io.StringIO(), io.StringIO()
    assert check.main([good, bad], out, err) == 1
    assert out.getvalue() == f"Checking {good}\n  SUCCESS: 2 rules found\n\nChecking {bad}\n\n"
    assert err.getvalue() == f"  FAILED:\n{bad}: rules[1]: relabel configuration for hashmod requires non-zero modulus\n"


@pytest.mark.parametrize("command", ["relabel", "rules"])  # "rules" is the old name of "check relabel"
def test_check_tells_a_prometheus_rule_file_from_relabel_rules(command, capsys):
    """"Rules" means two things: an alerting rule file given where relabel rules go is named as such, with the
    tool that checks it, instead of "not a list of relabel configs"."""
    from metricsgw.cli import main

    assert main(["check", command, str(RULES / "alerts/gpu.yml")]) == 1
    err = capsys.readouterr().err
    assert "Prometheus rule file" in err and "promtool check rules" in err
    assert main(["check", command, str(RULES / "relabel/dcgm.yml")]) == 0
