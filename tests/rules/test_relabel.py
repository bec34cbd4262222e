"""Relabel semantics, table-tested with the cases of Prometheus's model/relabel/relabel_test.go."""

from __future__ import annotations

import pytest

from metricsgw.model import canonical
from metricsgw.rules.relabel import InvalidRule, RelabelRule, RuleError, RuleSet, compile_template, expand

import re2


def L(**kv):
    return canonical(kv.items())


def run(labels, *configs):
    return RuleSet.from_configs(list(configs)).apply(labels)


# (input, configs, expected output or None = dropped); from relabel_test.go TestRelabel
PROMETHEUS_CASES = [
    (L(a="foo", b="bar", c="baz"),
     [dict(source_labels=["a"], regex="f(.*)", target_label="d", replacement="ch${1}-ch${1}")],
     L(a="foo", b="bar", c="baz", d="choo-choo")),
    (L(a="foo", b="bar", c="baz"),
     [dict(source_labels=["a", "b"], regex="f(.*);(.*)r", target_label="a", replacement="b${1}${2}m"),
      dict(source_labels=["c", "a"], regex="(b).*b(.*)ba(.*)", target_label="d", replacement="$1$2$2$3")],
     L(a="boobam", b="bar", c="baz", d="boooom")),
    (L(a="foo"),
     [dict(source_labels=["a"], regex=".*o.*", action="drop"),
      dict(source_labels=["a"], regex="f(.*)", target_label="d", replacement="ch$1-ch$1")],
     None),
    (L(a="foo", b="bar"), [dict(source_labels=["a"], regex=".*o.*", action="drop")], None),
    (L(a="abc"), [dict(source_labels=["a"], regex=".*(b).*", target_label="d", replacement="$1")],
     L(a="abc", d="b")),
    (L(a="foo"), [dict(source_labels=["a"], regex="no-match", action="drop")], L(a="foo")),
    (L(a="foo"), [dict(source_labels=["a"], regex="f|o", action="drop")], L(a="foo")),  # anchored
    (L(a="foo"), [dict(source_labels=["a"], regex="no-match", action="keep")], None),
    (L(a="foo"), [dict(source_labels=["a"], regex="f.*", action="keep")], L(a="foo")),
    (L(a="boo"), [dict(source_labels=["a"], regex="f", target_label="b", replacement="bar")], L(a="boo")),
    (L(a="foo", b="bar", c="baz"),
     [dict(source_labels=["c"], target_label="d", action="hashmod", modulus=1000)],
     L(a="foo", b="bar", c="baz", d="976")),
    (L(a="foo\nbar"), [dict(source_labels=["a"], target_label="b", action="hashmod", modulus=1000)],
     L(a="foo\nbar", b="734")),
    (L(a="foo", b1="bar", b2="baz"), [dict(regex="(b.*)", replacement="bar_${1}", action="labelmap")],
     L(a="foo", b1="bar", b2="baz", bar_b1="bar", bar_b2="baz")),
    (L(a="foo", __meta_my_bar="aaa", __meta_my_baz="bbb", __meta_other="ccc"),
     [dict(regex="__meta_(my.*)", replacement="${1}", action="labelmap")],
     L(a="foo", __meta_my_bar="aaa", __meta_my_baz="bbb", __meta_other="ccc", my_bar="aaa", my_baz="bbb")),
    (L(a="some-name-value"),
     [dict(source_labels=["a"], regex="some-([^-]+)-([^,]+)", replacement="${2}", target_label="${1}")],
     L(a="some-name-value", name="value")),
    (L(a="some-name-value"),  # replacement expands to "" -> the (absent) target is deleted
     [dict(source_labels=["a"], regex="some-([^-]+)-([^,]+)", replacement="${3}", target_label="${1}")],
     L(a="some-name-value")),
    (L(a="some-name-0"),  # templated target expands to an invalid name -> no change
     [dict(source_labels=["a"], regex="some-([^-]+)-([^,]+)", replacement="${1}", target_label="${3}"),
      dict(source_labels=["a"], regex="some-([^-]+)(-[^,]+)", replacement="${1}", target_label="${3}")],
     L(a="some-name-0")),
    (L(__meta_sd_tags="path:/secret,job:some-job,label:foo=bar"),
     [dict(source_labels=["__meta_sd_tags"], regex="(?:.+,|^)path:(/[^,]+).*", replacement="${1}",
           target_label="__metrics_path__"),
      dict(source_labels=["__meta_sd_tags"], regex="(?:.+,|^)job:([^,]+).*", replacement="${1}", target_label="job"),
      dict(source_labels=["__meta_sd_tags"], regex="(?:.+,|^)label:([^=]+)=([^,]+).*", replacement="${2}",
           target_label="${1}")],
     L(__meta_sd_tags="path:/secret,job:some-job,label:foo=bar", __metrics_path__="/secret", job="some-job",
       foo="bar")),
    (L(__meta_kubernetes_pod_container_port_name="foo", __meta_kubernetes_pod_annotation_XXX_metrics_port="9091"),
     [dict(regex="^__meta_kubernetes_pod_container_port_name$", action="labeldrop"),
      dict(source_labels=["__meta_kubernetes_pod_annotation_XXX_metrics_port"], regex="(.+)",
           replacement="metrics", target_label="__meta_kubernetes_pod_container_port_name"),
      dict(source_labels=["__meta_kubernetes_pod_container_port_name"], regex="^metrics$", action="keep")],
     L(__meta_kubernetes_pod_annotation_XXX_metrics_port="9091", __meta_kubernetes_pod_container_port_name="metrics")),
    (L(a="foo", b1="bar", b2="baz"), [dict(regex="(b.*)", action="labelkeep")], L(b1="bar", b2="baz")),
    (L(a="foo", b1="bar", b2="baz"), [dict(regex="(b.*)", action="labeldrop")], L(a="foo")),
    (L(foo="bAr123Foo"),
     [dict(source_labels=["foo"], action="uppercase", target_label="foo_uppercase"),
      dict(source_labels=["foo"], action="lowercase", target_label="foo_lowercase")],
     L(foo="bAr123Foo", foo_lowercase="bar123foo", foo_uppercase="BAR123FOO")),
    (L(__tmp_port="1234", __port1="1234", __port2="5678"),
     [dict(source_labels=["__tmp_port"], action="keepequal", target_label="__port1")],
     L(__tmp_port="1234", __port1="1234", __port2="5678")),
    (L(__tmp_port="1234", __port1="1234", __port2="5678"),
     [dict(source_labels=["__tmp_port"], action="dropequal", target_label="__port1")], None),
    (L(__tmp_port="1234", __port1="1234", __port2="5678"),
     [dict(source_labels=["__tmp_port"], action="dropequal", target_label="__port2")],
     L(__tmp_port="1234", __port1="1234", __port2="5678")),
    (L(__tmp_port="1234", __port1="1234", __port2="5678"),
     [dict(source_labels=["__tmp_port"], action="keepequal", target_label="__port2")], None),
]


@pytest.mark.parametrize("labels,configs,want", PROMETHEUS_CASES)
def test_prometheus_relabel_cases(labels, configs, want):
    assert run(labels, *configs) == want


MORE_CASES = [
    # action names are case-insensitive
    (L(a="x"), [dict(source_labels=["a"], regex="x", action="DROP")], None),
    # missing source label reads as ""; the default regex (.*) matches it; $1 = "" deletes the target
    (L(a="x", t="old"), [dict(source_labels=["missing"], target_label="t")], L(a="x")),
    # a fixed replacement with the default regex adds a label even from an empty source
    (L(a="x"), [dict(target_label="env", replacement="prod")], L(a="x", env="prod")),
    # separator joins source values, including empty ones
    (L(a="1", c="3"), [dict(source_labels=["a", "b", "c"], separator="-", regex="(.*)", target_label="j")],
     L(a="1", c="3", j="1--3")),
    # $name / ${name} with named groups; unknown names and out-of-range numbers expand to ""
    (L(a="k=v"), [dict(source_labels=["a"], regex="(?P<key>[^=]+)=(?P<val>.*)", target_label="$key",
                       replacement="${val}-$nope-${9}")], L(a="k=v", k="v--")),
    # "$1x" is group "1x" (Go's longest name), which does not exist -> ""; "${1}x" is group 1 then x
    (L(a="v"), [dict(source_labels=["a"], regex="(v)", target_label="t", replacement="$1x|${1}x|$$1")],
     L(a="v", t="|vx|$1")),
    # the regex is anchored and . matches a newline (^(?s:...)$)
    (L(a="line1\nline2"), [dict(source_labels=["a"], regex="line1.line2", action="drop")], None),
    (L(a="xfoox"), [dict(source_labels=["a"], regex="foo", action="drop")], L(a="xfoox")),
    # labeldrop everything -> no labels left -> dropped
    (L(a="1", b="2"), [dict(regex=".*", action="labeldrop")], None),
    # lowercase to "" (empty source) deletes the target
    (L(a="x", t="T"), [dict(source_labels=["nope"], action="lowercase", target_label="t")], L(a="x")),
    # Go's simple case mapping: no final sigma, no ß -> SS
    (L(a="ΣΑΣ ß"), [dict(source_labels=["a"], action="lowercase", target_label="l"),
                    dict(source_labels=["a"], action="uppercase", target_label="u")],
     L(a="ΣΑΣ ß", l="σασ ß", u="ΣΑΣ ß")),
    # labelmap onto an existing label overwrites it
    (L(x_a="new", a="old"), [dict(regex="x_(.*)", replacement="$1", action="labelmap")], L(a="new", x_a="new")),
    # Prometheus 2.42: an empty result deletes target_label as written; a templated one names no label
    (L(a="some-name-value", name="old"),
     [dict(source_labels=["a"], regex="some-([^-]+)-(.*)", target_label="${1}", replacement="${3}")],
     L(a="some-name-value", name="old")),
    # __name__ is an ordinary label to relabel
    (L(__name__="up", job="j"), [dict(source_labels=["__name__"], regex="up", target_label="__name__",
                                      replacement="renamed")], L(__name__="renamed", job="j")),
]


@pytest.mark.parametrize("labels,configs,want", MORE_CASES)
def test_more_relabel_semantics(labels, configs, want):
    assert run(labels, *configs) == want


def test_hashmod_uses_last_eight_md5_bytes_big_endian():
    import hashlib
    for value in ["", "node-1:9400", "ünïcode"]:
        want = int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % 7
        got = run(L(a=value), dict(source_labels=["a"], target_label="h", action="hashmod", modulus=7))
        assert dict(got)["h"] == str(want)


def test_apply_returns_canonical_sorted_labels():
    out = run(L(b="1"), dict(target_label="a", replacement="x"), dict(target_label="c", replacement="y"))
    assert out == (("a", "x"), ("b", "1"), ("c", "y"))


def test_empty_ruleset_passes_labels_through():
    assert RuleSet().apply(L(a="1")) == L(a="1")


# --- Go regexp.Expand ------------------------------------------------------------------------------
@pytest.mark.parametrize("template,want", [
    ("$1", "A"), ("${1}", "A"), ("$2$1", "BA"), ("$$", "$"), ("$", "$"), ("${", "${"), ("${1", "${1"),
    ("x$-y", "x$-y"), ("$01", ""), ("${0}", "AB"), ("$0", "AB"), ("$first-$second", "A-B"), ("${second}s", "Bs"),
    ("$10", ""), ("a$", "a$"),
])
def test_go_expand(template, want):
    rx = re2.compile("^(?s:(?P<first>A)(?P<second>B))$")
    m = rx.search("AB")
    assert expand(compile_template(template, dict(rx.groupindex)), m, rx.groups) == want


# --- validation: Prometheus's Validate / UnmarshalYAML messages ---------------------------------------
@pytest.mark.parametrize("config,message", [
    (dict(action="replace"), "relabel configuration for replace action requires 'target_label' value"),
    (dict(action="lowercase"), "requires 'target_label' value"),
    (dict(action="lowercase", target_label="${3}"), '"${3}" is invalid \'target_label\''),
    (dict(source_labels=["a"], regex="some-([^-]+)-([^,]+)", replacement="${1}", target_label="0${3}"),
     '"0${3}" is invalid \'target_label\''),
    (dict(source_labels=["a"], regex="some-([^-]+)-([^,]+)", replacement="${1}", target_label="-${3}"),
     '"-${3}" is invalid \'target_label\' for replace action'),
    (dict(target_label="bad-name"), '"bad-name" is invalid \'target_label\' for replace action'),
    (dict(action="hashmod", target_label="h"), "relabel configuration for hashmod requires non-zero modulus"),
    (dict(action="hashmod", target_label="h-", modulus=2), '"h-" is invalid \'target_label\' for hashmod action'),
    (dict(action="uppercase", target_label="u", replacement="x"), "'replacement' can not be set for uppercase action"),
    (dict(action="labelmap", replacement="-$1"), '"-$1" is invalid \'replacement\' for labelmap action'),
    (dict(action="keepequal", source_labels=["a"], target_label="b", regex="(.*)"),
     "keepequal action requires only 'source_labels' and `target_label`, and no other fields"),
    (dict(action="dropequal", source_labels=["a"], target_label="b", separator=","), "dropequal action requires only"),
    (dict(action="labeldrop", regex="a", source_labels=["a"]), "labeldrop action requires only 'regex', and no other fields"),
    (dict(action="labelkeep", regex="a", target_label="b"), "labelkeep action requires only 'regex'"),
    (dict(action="labelkeep", regex="a", replacement="x"), "labelkeep action requires only 'regex'"),
    (dict(action="explode"), 'unknown relabel action \'explode\''),
    (dict(action="drop", regex="("), "error parsing regexp"),
    (dict(action="drop", source_labels=["bad-name"]), "'bad-name' is not a valid label name"),
    (dict(action="drop", modulus=-1), "modulus: expected an unsigned integer"),
    (dict(action="drop", sauce_labels=["a"]), "field sauce_labels not found"),
])
def test_validation_messages(config, message):
    with pytest.raises(RuleError) as err:
        RuleSet.from_configs([dict(action="keep", regex=".*"), config], source="f.yml")
    assert err.value.source == "f.yml" and err.value.index == 1
    assert message in err.value.reason
    assert str(err.value).startswith("f.yml: rules[1]: ")


@pytest.mark.parametrize("config", [
    dict(source_labels=["a"], regex="some-([^-]+)-([^,]+)", replacement="${1}", target_label="${3}"),
    dict(action="keepequal", source_labels=["a"], target_label="b", separator=";"),  # equal to the default: fine
    dict(action="labeldrop", regex="pod_uid"),
    dict(action="LabelKeep", regex="__name__|job"),
    dict(target_label="foo${bar}foo", regex="(?P<bar>.*)"),
])
def test_valid_configs(config):
    assert len(RuleSet.from_configs([config])) == 1


@pytest.mark.parametrize("target,valid", [
    ("-label", False), ("label", True), ("label${1}", True), ("${1}label", True), ("${1}", True),
    ("${", False), ("$", False), ("${}", False), ("foo${", False), ("$1", True), ("asd$2asd", True),
    ("-foo${1}bar-", False), ("_${1}_", True), ("foo${bar}foo", True),
])
def test_target_label_validity(target, valid):
    """TestTargetLabelValidity from relabel_test.go, through the replace action's validation."""
    if valid:
        RelabelRule.from_config(dict(target_label=target))
    else:
        with pytest.raises(InvalidRule):
            RelabelRule.from_config(dict(target_label=target))


def test_null_rule_and_non_list():
    with pytest.raises(RuleError, match=r"rules\[0\]: empty or null"):
        RuleSet.from_configs([None])
    with pytest.raises(RuleError, match="must be a list"):
        RuleSet.from_configs({"action": "drop"})


def test_memoised_results_match_fresh_rules(monkeypatch):
    """Per-rule memoisation (also across a cache overflow) gives what a fresh rule set gives."""
    import metricsgw.rules.relabel as relabel

    configs = [dict(source_labels=["__name__", "le"], regex="h_bucket;(0\\.5|2)", action="drop"),
               dict(source_labels=["a"], regex="(x+)(y*)", target_label="t_$2", replacement="$1"),
               dict(regex="m_(.*)", replacement="$1", action="labelmap"),
               dict(regex="junk.*", action="labeldrop")]
    inputs = [L(__name__=n, le=le, a=a, m_k="v", junk1="j")
              for n in ("h_bucket", "other") for le in ("0.5", "1", "2") for a in ("x", "xy", "xyy", "q")]
    monkeypatch.setattr(relabel, "_CACHE_MAX", 3)
    shared = RuleSet.from_configs(configs)
    for _ in range(3):
        for labels in inputs:
            assert shared.apply(labels) == RuleSet.from_configs(configs).apply(labels)
    assert shared.apply(L(__name__="h_bucket", le="1", a="xy")) == L(__name__="h_bucket", le="1", a="xy", t_y="x")
