"""Every panel query of every shipped dashboard runs on metricsgw and returns data.

One metricsgw server gets 30 minutes of the bench GPU-cluster workload (20 GPU nodes, 15 s
scrapes) by remote write, plus a few scrapes of its own /metrics written back to itself (so the
metricsgw dashboard has data; first a discarded sample and a guard rejection are provoked so
those panels have series). Then each target is interpolated the way Grafana would and run as
a range query over the 30 minutes and as an instant query at the last scrape: it must succeed
and return at least one series. Structural checks need no server; real promtool checks syntax.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bench.procs import start_metricsgw
from bench.workload import Workload
from tests.dashboards.grafana import (interpolate, load_dashboards, panels, parse_label_values,
                                      resolve_variables, targets, variable_query)
from tests.dashboards.loading import (INTERVAL_MS, aligned_now_ms, provoke_discard_and_guard_rejection, scrape_into,
                                      write_workload)
from tests.e2e.client import api

NODES = 20
SCRAPES = 121  # 30 minutes at 15 s
SELF_SCRAPES = 6
PROMTOOL = "/usr/bin/promtool"

DASHBOARDS = load_dashboards()
TARGETS = [t for name, d in DASHBOARDS.items() for t in targets(name, d)]


# ------------------------------------------------------------------------------------------ structure
@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_structure(name):
    d = DASHBOARDS[name]
    assert d.get("uid") and d.get("title"), "uid and title are required for import"
    assert d.get("schemaVersion", 0) >= 38
    variables = d["templating"]["list"]
    ds = [v for v in variables if v["type"] == "datasource"]
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
    for v in variables:
        if v["type"] == "query":
            parse_label_values(variable_query(v))  # raises if not label_values(...)
            assert v["datasource"]["uid"] == "${datasource}"


def test_interpolation_syntaxes():
    values = {"node": "10.0.0.1", "ns": ".*", "verb": "GET"}
    got = interpolate('a{instance=~"${node:regex}:.*", ns=~"$ns", v="[[verb]]", w="${verb}"}[$__rate_interval]', values)
    assert got == r'a{instance=~"10\.0\.0\.1:.*", ns=~".*", v="GET", w="GET"}[1m]'
    # label_replace's "$1" and unknown names are not Grafana variables: left alone
    assert interpolate('label_replace(x, "n", "$1", "i", "(.*)") $unknown', values) == \
        'label_replace(x, "n", "$1", "i", "(.*)") $unknown'
    assert interpolate("[[ns:regex]] $__range $__interval", values) == ".* 30m 15s"


def test_variable_resolution_uses_all_value_and_regex():
    d = {"templating": {"list": [
        {"type": "datasource", "name": "datasource", "query": "prometheus"},
        {"type": "query", "name": "node", "query": "label_values(m, instance)", "regex": "/([^:]+):.*/"},
        {"type": "query", "name": "ns", "query": 'label_values(m{instance=~"$node:.*"}, namespace)',
         "includeAll": True, "allValue": ".*"}]}}
    calls = []

    def lv(label, selector):
        calls.append((label, selector))
        return {"instance": ["10.0.0.2:9455", "10.0.0.1:9455"], "namespace": ["b", "a"]}[label]

    assert resolve_variables(d, lv) == {"node": "10.0.0.1", "ns": ".*"}
    assert calls[1] == ("namespace", 'm{instance=~"10.0.0.1:.*"}')
    assert resolve_variables(d, lv, use_all=False)["ns"] == "a"


@pytest.mark.skipif(not Path(PROMTOOL).exists(), reason="promtool (Debian prometheus package) not installed")
def test_real_promtool_parses_every_query(tmp_path):
    """Prometheus's own parser accepts every interpolated expression (as recording rules)."""
    values = {v["name"]: ".*" for d in DASHBOARDS.values() for v in d["templating"]["list"]}
    rules = [{"record": f"dashboard:query_{i}", "expr": interpolate(t.expr, values)} for i, t in enumerate(TARGETS)]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    res = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------ live server
@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    work = tmp_path_factory.mktemp("dashboards")
    gw = start_metricsgw(work / "gw")
    try:
        gw.wait_ready()
        end_ms = aligned_now_ms()
        write_workload(gw.write_url, Workload(NODES, seed=1), end_ms, SCRAPES, samples_per_series=11)
        provoke_discard_and_guard_rejection(gw.base_url)
        instance = gw.base_url.removeprefix("http://")
        for k in range(SELF_SCRAPES):  # stamped on the workload's last scrapes, so both fill the same windows
            t_ms = end_ms - (SELF_SCRAPES - 1 - k) * INTERVAL_MS
            # some traffic between scrapes, so counters and histograms move
            api(gw.base_url, "/api/v1/query", {"query": "sum(rate(up[1m]))", "time": t_ms / 1000})
            api(gw.base_url, "/api/v1/query_range", {"query": "up", "start": t_ms / 1000 - 600,
                                                     "end": t_ms / 1000, "step": 60})
            scrape_into([gw.base_url], gw.base_url, "metricsgw", instance, t_ms)
        yield gw, end_ms / 1000
    finally:
        gw.stop()


def _label_values(base_url: str, end_s: float):
    def fetch(label: str, selector: str | None) -> list[str]:
        params = {"start": end_s - 1800, "end": end_s}
        if selector:
            params["match[]"] = selector
        status, body = api(base_url, f"/api/v1/label/{label}/values", params)
        assert status == 200 and body["status"] == "success", body
        return body["data"]
    return fetch


@pytest.fixture(scope="module")
def variables(loaded):
    gw, end_s = loaded
    fetch = _label_values(gw.base_url, end_s)
    return {name: (resolve_variables(d, fetch), resolve_variables(d, fetch, use_all=False))
            for name, d in DASHBOARDS.items()}


def _non_empty(body: dict) -> bool:
    data = body["data"]
    if data["resultType"] == "scalar":
        return True
    if data["resultType"] == "matrix":
        return any(r["values"] for r in data["result"])
    return bool(data["result"])


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_panel_query_returns_data(loaded, variables, target):
    gw, end_s = loaded
    all_values, first_values = variables[target.dashboard]
    for values in (all_values, first_values):
        expr = interpolate(target.expr, values)
        assert "$" not in expr.replace('"$1"', ""), f"uninterpolated variable in {expr}"
        status, body = api(gw.base_url, "/api/v1/query_range",
                           {"query": expr, "start": end_s - 1800, "end": end_s, "step": 30}, method="POST")
        assert status == 200 and body.get("status") == "success", f"range {expr}: {status} {body}"
        assert _non_empty(body), f"range query returned nothing: {expr}"
        status, body = api(gw.base_url, "/api/v1/query", {"query": expr, "time": end_s}, method="POST")
        assert status == 200 and body.get("status") == "success", f"instant {expr}: {status} {body}"
        assert _non_empty(body), f"instant query returned nothing: {expr}"
