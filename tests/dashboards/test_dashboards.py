"""Every shipped dashboard works on data that went through `make serve`'s configuration.

The server (tests/served.py, shared with the rule tests) runs with the relabel files `make serve` passes and
holds 30 minutes of the bench workload (20 GPU nodes, 3 control-plane nodes, 15 s scrapes) plus scrapes of its own
/metrics. Each dashboard is resolved as Grafana resolves it, twice: with All for every variable, and with two
values picked in each multi-value variable (regex alternations, escaped as Grafana escapes them). Variables ask
/api/v1/label/<name>/values with the earlier variables interpolated into match[]. Each panel target is then
interpolated with Grafana's built-ins for its width ($__interval, $__rate_interval, $__range) and run as Grafana
runs it (a range query over the 30 minutes with the step aligned, or an instant query at the end).

Expected answers are worked out from the workload's label sets as the exporters sent them (tests/dashboards/
shape.py): a per-node panel must have one series per selected node, a fleet stat one series, a legend must
show every label it names and tell series apart. Structural checks need no server; real promtool parses.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from metricsgw.model import Matcher
from metricsgw.promql import parser as P
from tests.dashboards.grafana import (RANGE_S, Selection, builtins, choose_all, choose_two, format_value,
                                      interpolate, load_dashboards, panels, parse_label_values, resolve_selections,
                                      step_s, targets, variable_query, variables)
from tests.dashboards.panel_check import label_values_fetcher, result_series, run_target, target_problems

PROMTOOL = "/usr/bin/promtool"
DASHBOARDS = load_dashboards()
TARGETS = [t for name, d in DASHBOARDS.items() for t in targets(name, d)]
SCENARIOS = {"all": choose_all, "two": choose_two}


# ------------------------------------------------------------------------------------------ structure
@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_structure(name):
    d = DASHBOARDS[name]
    assert d.get("uid") and d.get("title"), "uid and title are required for import"
    assert d.get("schemaVersion", 0) >= 38
    all_vars = d["templating"]["list"]
    ds = [v for v in all_vars if v["type"] == "datasource"]
    assert ds and ds[0]["name"] == "datasource" and ds[0]["query"] == "prometheus"
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(d):
        if p["type"] == "row":
            continue
        assert p.get("targets"), f"panel {p['title']!r} has no targets"
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            assert t.get("expr") and t.get("refId"), p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
    for v in all_vars:
        if v["type"] == "query":
            parse_label_values(variable_query(v))  # raises if not label_values(...)
            assert v["datasource"]["uid"] == "${datasource}"


def test_interpolation_syntaxes():
    values = {"node": "10.0.0.1", "ns": ".*", "verb": "GET"}
    got = interpolate('a{instance=~"${node:regex}:.*", ns=~"$ns", v="[[verb]]", w="${verb}"}[$__rate_interval]', values)
    assert got == r'a{instance=~"10\.0\.0\.1:.*", ns=~".*", v="GET", w="GET"}[60s]'
    # label_replace's "$1" and unknown names are not Grafana variables: left alone
    assert interpolate('label_replace(x, "n", "$1", "i", "(.*)") $unknown', values) == \
        'label_replace(x, "n", "$1", "i", "(.*)") $unknown'
    assert interpolate("[[ns:regex]] $__range $__interval", values) == ".* 1800s 15s"


def test_grafana_formats_multi_values_as_escaped_alternations():
    multi = {"multi": True, "includeAll": True, "allValue": ".*"}
    assert format_value(multi, Selection(("10.0.0.1", "a|b"))) == r"(10\\.0\\.0\\.1|a\\|b)"
    assert format_value(multi, Selection(("x", "y"), is_all=True)) == ".*"  # a custom All value goes in as it is
    assert format_value({"multi": True}, Selection(("x", "y"), is_all=True)) == "(x|y)"
    assert format_value({}, Selection(("it's",))) == r"it\\'s"
    # what PromQL makes of the escaped text: a regex matching exactly the picked values
    m = P.matchers(P.parse('x{i=~"' + format_value(multi, Selection(("10.0.0.1", "a|b"))) + '"}'))[0]
    assert m.matches("10.0.0.1") and m.matches("a|b") and not m.matches("10x0y0z1") and not m.matches("a")


def test_grafana_interval_builtins():
    assert builtins(1800, 1000)["__rate_interval"] == "60s"  # 4 x scrape interval
    assert builtins(6 * 3600, 200) == {"__interval": "120s", "__interval_ms": "120000", "__rate_interval": "135s",
                                       "__range": "21600s", "__range_s": "21600", "__range_ms": "21600000"}
    assert step_s(7 * 86400, 1000) == 600  # 604.8 s rounds to 10m


def test_variable_resolution_uses_earlier_variables():
    d = {"templating": {"list": [
        {"type": "datasource", "name": "datasource", "query": "prometheus"},
        {"type": "query", "name": "node", "query": "label_values(m, instance)", "regex": "/([^:]+):.*/",
         "multi": True, "includeAll": True, "allValue": ".*"},
        {"type": "query", "name": "ns", "query": 'label_values(m{instance=~"$node:.*"}, namespace)',
         "includeAll": True, "multi": True, "allValue": ".*"}]}}
    calls = []

    def lv(label, selector):
        calls.append((label, selector))
        return {"instance": ["10.0.0.2:9455", "10.0.0.1:9455", "10.0.0.3:9455"], "namespace": ["b", "a"]}[label]

    assert resolve_selections(d, lv, choose_all)[1] == {"node": ".*", "ns": ".*"}
    assert calls[1] == ("namespace", 'm{instance=~".*:.*"}')
    calls.clear()
    picked, texts = resolve_selections(d, lv, choose_two)
    assert picked["node"].values == ("10.0.0.1", "10.0.0.2")
    assert calls[1] == ("namespace", r'm{instance=~"(10\\.0\\.0\\.1|10\\.0\\.0\\.2):.*"}')
    assert texts["ns"] == "(a|b)"


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool (Debian prometheus package) not installed")
def test_real_promtool_parses_every_query(tmp_path):
    """Prometheus's own parser accepts every interpolated expression (as recording rules)."""
    values = {v["name"]: ".*" for d in DASHBOARDS.values() for v in d["templating"]["list"]}
    rules = [{"record": f"dashboard:query_{i}", "expr": interpolate(t.expr, values)} for i, t in enumerate(TARGETS)]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    res = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------ on the server
class _Resolved(dict):
    """(dashboard, scenario) -> resolve_selections(...), resolved on first use; a variable without values fails
    the tests of that dashboard only, naming it."""

    def __init__(self, served) -> None:
        super().__init__()
        self.fetch = label_values_fetcher(served.base_url, served.end_s)

    def __getitem__(self, key):
        name, scenario = key
        if key not in self:
            try:
                self[key] = resolve_selections(DASHBOARDS[name], self.fetch, SCENARIOS[scenario])
            except LookupError as err:
                self[key] = err
        got = super().__getitem__(key)
        if isinstance(got, LookupError):
            pytest.fail(f"dashboards/{name}: {got}")
        return got


@pytest.fixture(scope="module")
def resolved(served):
    return _Resolved(served)


def _reference_values(reference: list[dict], selector: str | None, label: str) -> set[str]:
    ms = P.matchers(P.parse(selector)) if selector else []
    return {s[label] for s in reference if label in s and all(m.matches(s.get(m.name, "")) for m in ms)}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_variables_offer_every_value_the_workload_has(served, resolved, name, scenario):
    """Each variable lists exactly the values the workload sent (before relabelling) for its selector."""
    picked, texts = resolved[(name, scenario)]
    d = DASHBOARDS[name]
    fetch = label_values_fetcher(served.base_url, served.end_s)
    for var in variables(d):
        if var.get("type") != "query":
            continue
        earlier = {k: v for k, v in texts.items() if k != var["name"]}
        selector, label = parse_label_values(interpolate(variable_query(var), earlier))
        want = _reference_values(served.reference, selector, label)
        got = set(fetch(label, selector))
        assert want and got == want, f"{name} ${var['name']} ({selector}, {label}): got {sorted(got)[:5]}..., " \
                                     f"the workload has {sorted(want)[:5]}... ({len(got)} vs {len(want)})"
        if scenario == "two" and var.get("multi"):
            assert len(picked[var["name"]].values) == min(2, len(want))


def _query(served, target, expr: str) -> dict:
    status, body = run_target(served.base_url, served.end_s, target, expr)
    assert status == 200 and body.get("status") == "success", f"{target.name}: {expr}: {status} {body}"
    return body["data"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_panel_target_returns_the_shape_it_needs(served, resolved, target, scenario):
    _picked, texts = resolved[(target.dashboard, scenario)]
    problems = target_problems(served.base_url, served.end_s, served.reference, target, texts)
    assert not problems, f"[{scenario}] " + "\n".join(problems)


PER_NODE = [t for t in TARGETS if "by node" in t.panel]


def _node_of(labels: dict) -> str:
    """GPU panels tell nodes apart by Hostname; network panels by the node's address (instance without port)."""
    return labels.get("Hostname") or labels.get("node") or labels["instance"].split(":")[0]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("target", PER_NODE, ids=[t.name for t in PER_NODE])
def test_per_node_panels_have_one_series_per_selected_node(served, resolved, target, scenario):
    """The issue's symptom, asked directly: one line per node that has data under the picked filters
    (with All: every node of the workload)."""
    picked, texts = resolved[(target.dashboard, scenario)]
    expr = interpolate(target.expr, texts, builtins(RANGE_S, target.max_data_points))
    first = next(n for n in _selectors(P.parse(expr)))
    ms = P.matchers(first)
    want = {_node_of(r) for r in served.reference if all(m.matches(r.get(m.name, "")) for m in ms)}
    if all(sel.is_all for sel in picked.values()):
        assert len(want) == served.workload.nodes
    got = result_series(_query(served, target, expr))
    assert len(got) == len(want) and {_node_of(g) for g in got} == want, \
        f"{target.name} [{scenario}]: {len(got)} series for nodes {sorted(want)}"


def _selectors(node):
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node
    elif kind == "MatrixSelector":
        yield node.vector_selector
    for attr in ("expr", "lhs", "rhs"):
        if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr", "AggregateExpr", "BinaryExpr") and \
                getattr(node, attr, None) is not None:
            yield from _selectors(getattr(node, attr))
    if kind == "Call":
        for arg in node.args:
            yield from _selectors(arg)


def test_node_variables_escape_dots(resolved):
    """IP-valued node variables picked two at a time reach the query as escaped alternations."""
    _picked, texts = resolved[("cluster-network.json", "two")]
    assert re.fullmatch(r"\((10\\\\\.\d+\\\\\.\d+\\\\\.\d+\|?){2}\)", texts["node"]), texts["node"]
    assert Matcher("instance", "=~", "(10\\.20\\.0\\.1|10\\.20\\.0\\.2):.*").matches("10.20.0.1:9455")
