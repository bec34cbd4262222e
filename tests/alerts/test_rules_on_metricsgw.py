"""Every shipped alert and recording rule works on metricsgw as `make serve` runs it.

On the workload (the session's `served` server: 30 minutes of the bench workload and metricsgw's own metrics,
through the relabel rules make serve loads): each rule's signal - its expression without the threshold that
makes it an alert - returns the series the workload's label sets say it should, carrying every label its
annotations show. Thresholds are not crossed by a healthy workload, so:

On crafted faults: the input series of each promtool test (tests/alerts/*.test.yml) are written into a fresh
metricsgw (same relabel rules) and every alert case is evaluated there through the HTTP API the way a ruler
does - an alert expected to fire must be present at every evaluation of its `for:` window with promtool's
expected labels, an alert expected silent must not; recording rules must give promtool's samples.
"""

from __future__ import annotations

import math
import re

import pytest
import yaml

from metricsgw.promql import parser as P
from testkit.procs import start_metricsgw
from tests.alerts.promtool_series import duration_ms, expand_values
from tests.contract import series_labels
from tests.dashboards.loading import aligned_now_ms, write_series
from tests.dashboards.shape import expected_shape
from tests.e2e.client import api
from tests.shipped import ALERT_TEST_DIR, alert_rules, make_serve_rule_files

RULES = alert_rules()
BY_NAME = {r.name: r for r in RULES}
_COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
_TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


def signals(node) -> list:
    """The parts of an alert expression that must return data on a healthy system: a comparison with a number
    gives its other side, a comparison of two vectors and and/or/unless give both sides."""
    kind = type(node).__name__
    if kind == "ParenExpr":
        return signals(node.expr)
    if kind == "BinaryExpr":
        op = P.op_name(node)
        if op in ("and", "or", "unless"):
            return signals(node.lhs) + signals(node.rhs)
        if op in _COMPARISONS and not P.is_bool(node):
            sides = [s for s in (node.lhs, node.rhs) if type(s).__name__ != "NumberLiteral" and not _constant(s)]
            return [x for s in sides for x in signals(s)]
    return [node]


def _constant(node) -> bool:
    kind = type(node).__name__
    if kind == "NumberLiteral":
        return True
    if kind == "BinaryExpr":
        return _constant(node.lhs) and _constant(node.rhs)
    return kind == "ParenExpr" and _constant(node.expr)


def test_signals_strip_thresholds_only():
    got = [str(s) for s in signals(P.parse("sum(rate(a[5m])) / sum(rate(b[5m])) > 0.05 or c > 5 * 1024 ^ 3"))]
    assert got == ["sum(rate(a{}[5m])) / sum(rate(b{}[5m]))", "c{}"]
    assert [str(s) for s in signals(P.parse("count(a) > count(b)"))] == ["count(a{})", "count(b{})"]


# ------------------------------------------------------------------------------------------ on the workload
SIGNALS = [(r, str(s)) for r in RULES for s in signals(P.parse(r.expr))]


@pytest.mark.parametrize("rule,signal", SIGNALS, ids=[f"{r.name}:{i}" for i, (r, _s) in enumerate(SIGNALS)])
def test_rule_signal_returns_data_on_the_workload(served, rule, signal):
    status, body = api(served.base_url, "/api/v1/query", {"query": signal, "time": served.end_s}, method="POST")
    assert status == 200 and body["status"] == "success", f"{rule.title}: {signal}: {body}"
    got = [r["metric"] for r in body["data"]["result"]]
    want = expected_shape(signal, served.reference, instant=True)
    assert want.hi >= 1, f"{rule.title}: {signal}: the workload has no series for it"
    assert got and want.lo <= len(got) <= want.hi, \
        f"{rule.title}: {signal}: {len(got)} series, expected {want.lo}..{want.hi}"
    shown = {n for text in rule.annotations.values() for n in _TEMPLATE_LABEL.findall(text)}
    always = {n for n in shown if all(dict(g).get(n) for g in want.groups)}
    assert always == {n for n in shown if any(dict(g).get(n) for g in want.groups)}, \
        f"{rule.title}: annotations name labels the workload leaves empty on some series: {shown - always}"
    for labels in got:
        assert all(labels.get(n) for n in always), f"{rule.title}: {signal}: {labels} lacks one of {sorted(always)}"


# ------------------------------------------------------------------------------------------ crafted faults
CASES = [(path.name, i, case) for path in sorted(ALERT_TEST_DIR.glob("*.test.yml"))
         for i, case in enumerate(yaml.safe_load(path.read_text())["tests"])]
CASE_SPACING_MS = 3 * 3_600_000  # more than any rule's window, so cases do not see each other's series


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    """A fresh metricsgw with make serve's relabel rules holding every case's input series, each case from its
    own base time (promtool's t=0)."""
    gw = start_metricsgw(tmp_path_factory.mktemp("faults") / "gw",
                         extra=[f"--rules.file={p}" for p in make_serve_rule_files()])
    try:
        gw.wait_ready()
        first = (aligned_now_ms(60_000) - len(CASES) * CASE_SPACING_MS - CASE_SPACING_MS)
        bases = {}
        for k, (name, i, case) in enumerate(CASES):  # oldest first: each series' samples arrive in time order
            base = bases[(name, i)] = first + k * CASE_SPACING_MS
            step = duration_ms(case.get("interval", "1m"))
            series = []
            for s in case["input_series"]:
                points = [(base + j * step, v) for j, v in enumerate(expand_values(s["values"])) if v is not None]
                series.append((list(series_labels(s["series"])), points))
            write_series(gw.base_url, series)
        yield gw, bases
    finally:
        gw.stop()


ALERT_CASES = [(name, i, t, case) for name, i, case in CASES for t in case.get("alert_rule_test", [])]


def _eval_steps(case: dict) -> int:
    return duration_ms(case.get("evaluation_interval", "1m"))


@pytest.mark.parametrize("name,i,test,case", ALERT_CASES,
                         ids=[f"{n}:{i}:{t['alertname']}@{t['eval_time']}" for n, i, t, _c in ALERT_CASES])
def test_alert_case_on_metricsgw(faults, name, i, test, case):
    gw, bases = faults
    rule = BY_NAME[test["alertname"]]
    at_ms = bases[(name, i)] + duration_ms(test["eval_time"])
    step_ms = duration_ms(yaml.safe_load((ALERT_TEST_DIR / name).read_text()).get("evaluation_interval", "1m"))
    for_ms = duration_ms(rule.for_)
    start_ms = at_ms - for_ms // step_ms * step_ms
    status, body = api(gw.base_url, "/api/v1/query_range", {"query": rule.expr, "start": start_ms / 1000,
                                                             "end": at_ms / 1000, "step": step_ms / 1000},
                       method="POST")
    assert status == 200 and body["status"] == "success", f"{rule.title}: {body}"
    steps = (at_ms - start_ms) // step_ms + 1
    # firing = present at every evaluation of the for: window (the ruler's pending -> firing)
    firing = {frozenset((k, v) for k, v in r["metric"].items() if k != "__name__")
              for r in body["data"]["result"] if len(r["values"]) == steps}
    want = {frozenset((k, str(v)) for k, v in a["exp_labels"].items() if k != "alertname" and k not in rule.labels)
            for a in test.get("exp_alerts") or []}
    assert firing == want, (f"{rule.title} at {test['eval_time']} ({name} case {i}) on metricsgw: firing "
                            f"{[dict(f) for f in firing]}, promtool expects {[dict(w) for w in want]}")


EXPR_CASES = [(name, i, t) for name, i, case in CASES for t in case.get("promql_expr_test", [])]


@pytest.mark.parametrize("name,i,test", EXPR_CASES, ids=[f"{n}:{i}:{t['expr']}" for n, i, t in EXPR_CASES])
def test_recording_case_on_metricsgw(faults, name, i, test):
    """promtool evaluates the recorded series; metricsgw is asked the recording rule's own expression."""
    gw, bases = faults
    rule = BY_NAME[test["expr"].strip()]
    at_s = (bases[(name, i)] + duration_ms(test["eval_time"])) / 1000
    status, body = api(gw.base_url, "/api/v1/query", {"query": rule.expr, "time": at_s}, method="POST")
    assert status == 200 and body["status"] == "success", body
    got = {frozenset(r["metric"].items()): float(r["value"][1]) for r in body["data"]["result"]}
    want = {frozenset((k, v) for k, v in series_labels(s["labels"]) if k != "__name__"): float(s["value"])
            for s in test["exp_samples"]}
    assert got.keys() == want.keys(), f"{rule.title}: got {got}, promtool expects {want}"
    for k, v in want.items():
        assert math.isclose(got[k], v, rel_tol=1e-9), f"{rule.title} {dict(k)}: {got[k]} != {v}"
