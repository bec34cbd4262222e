"""The advisor's rules, applied, keep every shipped panel's and rule's answer.

Gateway A runs as ``make serve`` runs it and holds 30 minutes of the bench workload plus scrapes of its own
/metrics. ``metricsgw advise``'s judgement (the same ``advise()`` the command runs, over A's HTTP API, reading the
shipped dashboards and rule files) proposes rules; gateway B runs with them appended to ``make serve``'s and is sent
exactly what A was sent. Every shipped dashboard target (every variable at All, resolved on each gateway as
Grafana resolves it) and every shipped rule expression must answer the same on both, while B stores fewer series
and carries fewer labels: the rules did something, and nothing a dashboard or rule shows changed.
"""

from __future__ import annotations

import json
import math

import pytest

from metricsgw.advisor.gateway import Gateway
from metricsgw.advisor.report import relabel_yaml
from metricsgw.advisor.run import Options, advise, usage_of
from testkit.procs import start_metricsgw
from testkit.workload import Workload
from tests.dashboards.grafana import choose_all, load_dashboards, resolve_selections, targets, interpolate, builtins
from tests.dashboards.loading import INTERVAL_MS, aligned_now_ms, exposition_to_series, scrape, write_series
from tests.dashboards.panel_check import label_values_fetcher, run_target
from tests.e2e.client import api
from tests.served import write_relabelled_workload
from tests.shipped import REPO, alert_rule_files, alert_rules, make_serve_rule_files

NODES = 4
SELF_SCRAPES = 4
DASHBOARDS = load_dashboards()


def _start(work, rule_files) -> object:
    gw = start_metricsgw(work, extra=[f"--rules.file={p}" for p in rule_files])
    gw.wait_ready()
    return gw


def _load(gw, workload: Workload, end_ms: int, self_series: list) -> None:
    write_relabelled_workload(gw, workload, end_ms)
    for series in self_series:
        write_series(gw.base_url, series)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    work = tmp_path_factory.mktemp("advise-keeps-panels")
    served_rules = make_serve_rule_files()
    workload, end_ms = Workload(NODES, seed=1), aligned_now_ms()
    a = _start(work / "a", served_rules)
    started = [a]
    try:
        _load(a, workload, end_ms, [])
        # A's own /metrics, scraped on the workload's last scrapes and kept, so B is sent the very same samples
        instance = a.base_url.removeprefix("http://")
        self_series = []
        for k in range(SELF_SCRAPES):
            t_ms = end_ms - (SELF_SCRAPES - 1 - k) * INTERVAL_MS
            api(a.base_url, "/api/v1/query", {"query": "sum(rate(up[1m]))", "time": t_ms / 1000})
            self_series.append(exposition_to_series(scrape(a.base_url), "metricsgw", instance, t_ms))
            write_series(a.base_url, self_series[-1])
        usage = usage_of(dashboards=[str(p) for p in sorted((REPO / "dashboards").glob("*.json"))],
                         rules=[str(p) for p in alert_rule_files()])
        advice = advise(Gateway(a.base_url), usage, Options(top=10_000))
        advised = work / "advised.yml"
        advised.write_text(relabel_yaml(advice.proposals))
        b = _start(work / "b", [*served_rules, advised])
        started.append(b)
        _load(b, workload, end_ms, self_series)
        yield a, b, end_ms / 1000, advice
    finally:
        for gw in started:
            gw.stop()


def _count(base_url: str, query: str, t: float) -> int:
    status, body = api(base_url, "/api/v1/query", {"query": query, "time": t})
    assert status == 200, body
    return int(float(body["data"]["result"][0]["value"][1])) if body["data"]["result"] else 0


def _series_of(body: dict) -> dict:
    data = body["data"]
    if data["resultType"] not in ("vector", "matrix"):
        return {"": [data["result"]]}
    return {json.dumps(r["metric"], sort_keys=True): r.get("values") or [r["value"]] for r in data["result"]}


def _close(x: str, y: str) -> bool:
    return x == y or math.isclose(float(x), float(y), rel_tol=1e-9)


def _differ(got_a: tuple[int, dict], got_b: tuple[int, dict]) -> bool:
    """Whether two answers differ as a panel shows them: status, warnings, the series (in any order: an instant
    vector's order is not part of Prometheus' answer) and their points. Values may differ in the last bits: a sum
    or average adds a group's series in the order of their ids, which differ once label sets do (Prometheus'
    order changes the same way)."""
    (status_a, a), (status_b, b) = got_a, got_b
    if status_a != status_b or a.get("status") != b.get("status") or a.get("warnings") != b.get("warnings"):
        return True
    if a.get("status") != "success":
        return a != b
    if a["data"]["resultType"] != b["data"]["resultType"]:
        return True
    sa, sb = _series_of(a), _series_of(b)
    return sa.keys() != sb.keys() or any(
        len(sa[k]) != len(sb[k]) or any(pa[0] != pb[0] or not _close(pa[1], pb[1]) for pa, pb in zip(sa[k], sb[k]))
        for k in sa)


def test_the_rules_did_something(pair):
    a, b, end_s, advice = pair
    p = advice.proposals
    applied = [r for r in p.removals if r.safe]
    assert p.drops and applied, relabel_yaml(p)
    every = 'count({__name__=~".+"})'
    assert _count(b.base_url, every, end_s) == _count(a.base_url, every, end_s) - p.dropped_series
    for r in applied:
        for label in r.labels:  # the label is gone from every series of the metric, none of which merged
            assert _count(a.base_url, f'count({r.metric}{{{label}!=""}})', end_s) > 0
            assert _count(b.base_url, f'count({r.metric}{{{label}!=""}})', end_s) == 0
            assert _count(b.base_url, f"count({r.metric})", end_s) == _count(a.base_url, f"count({r.metric})", end_s)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_answers_the_same(pair, name):
    a, b, end_s, _ = pair
    _, texts = resolve_selections(DASHBOARDS[name], label_values_fetcher(a.base_url, end_s), choose_all)
    assert resolve_selections(DASHBOARDS[name], label_values_fetcher(b.base_url, end_s), choose_all)[1] == texts
    problems, answered = [], 0
    for t in targets(name, DASHBOARDS[name]):
        expr = interpolate(t.expr, texts, builtins(max_data_points=t.max_data_points))
        got_a, got_b = run_target(a.base_url, end_s, t, expr), run_target(b.base_url, end_s, t, expr)
        if _differ(got_a, got_b):
            problems.append(f"panel {t.panel!r} ({t.ref_id}) {expr}: {got_a[0]} {str(got_a[1])[:200]} != "
                            f"{got_b[0]} {str(got_b[1])[:200]}")
        answered += bool(got_a[0] == 200 and got_a[1]["data"]["result"])
    assert not problems, "\n".join(problems[:5])
    assert answered, "no panel of the dashboard has data: the comparison would prove nothing"


def test_every_rule_answers_the_same(pair):
    a, b, end_s, _ = pair
    problems = []
    for rule in alert_rules():
        got_a = api(a.base_url, "/api/v1/query", {"query": rule.expr, "time": end_s})
        got_b = api(b.base_url, "/api/v1/query", {"query": rule.expr, "time": end_s})
        if _differ(got_a, got_b):
            problems.append(f"{rule.title}: {str(got_a[1])[:200]} != {str(got_b[1])[:200]}")
    assert not problems, "\n".join(problems[:5])
