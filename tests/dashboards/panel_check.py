"""One dashboard target on a live server, as Grafana runs it, against the shape the workload implies.

``target_problems()`` returns what is wrong (empty when the panel shows what it should): the query fails or
returns nothing, the series count is outside what tests/dashboards/shape.py works out from the label sets the
exporters sent, a legend label is missing, or two series share a legend. Used by the dashboard tests and by the
test that shows a breaking relabel rule is caught.
"""

from __future__ import annotations

import math
import re

from tests.dashboards.grafana import RANGE_S, Target, builtins, interpolate, step_s
from tests.dashboards.shape import expected_shape
from tests.e2e.client import api

LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


def label_values_fetcher(base_url: str, end_s: float):
    """Grafana's label_values(selector, label): /api/v1/label/<label>/values?match[]=selector over the range."""
    def fetch(label: str, selector: str | None) -> list[str]:
        params = {"start": end_s - RANGE_S, "end": end_s}
        if selector:
            params["match[]"] = selector
        status, body = api(base_url, f"/api/v1/label/{label}/values", params)
        assert status == 200 and body["status"] == "success", body
        return body["data"]
    return fetch


def run_target(base_url: str, end_s: float, target: Target, expr: str) -> tuple[int, dict]:
    """An instant query at the end, or a range query over RANGE_S with Grafana's step and alignRange."""
    if target.instant:
        return api(base_url, "/api/v1/query", {"query": expr, "time": end_s}, method="POST")
    step = step_s(RANGE_S, target.max_data_points)
    start, end = math.floor((end_s - RANGE_S) / step) * step, math.ceil(end_s / step) * step
    return api(base_url, "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step},
               method="POST")


def result_series(data: dict) -> list[dict]:
    if data["resultType"] == "scalar":
        return [{}]
    if data["resultType"] == "matrix":
        return [r["metric"] for r in data["result"] if r["values"]]
    return [r["metric"] for r in data["result"]]


def target_problems(base_url: str, end_s: float, reference: list[dict], target: Target,
                    texts: dict[str, str]) -> list[str]:
    expr = interpolate(target.expr, texts, builtins(RANGE_S, target.max_data_points))
    where = f"dashboards/{target.dashboard} panel {target.panel!r} ({target.ref_id}): {expr}"
    if "$" in expr.replace('"$1"', ""):
        return [f"{where}: uninterpolated variable"]
    status, body = run_target(base_url, end_s, target, expr)
    if status != 200 or body.get("status") != "success":
        return [f"{where}: {status} {body}"]
    got = result_series(body["data"])
    want = expected_shape(expr, reference, target.instant)
    if want is not None and want.hi < 1:
        return [f"{where}: the workload has no series this panel could show"]
    if not got:
        return [f"{where}: no data"]
    problems = []
    if want is not None and not want.lo <= len(got) <= want.hi:
        problems.append(f"{where}: {len(got)} series, expected {want.lo}..{want.hi} "
                        f"(e.g. {sorted(map(sorted, want.groups))[:2]})")
    shown = LEGEND_LABEL.findall(target.legend)
    # a label the workload leaves empty on some series (subresource="") may show empty; the others may not
    always = [n for n in shown if want is not None and want.groups and all(dict(g).get(n) for g in want.groups)]
    lacking = [labels for labels in got if any(not labels.get(n) for n in always)]
    if lacking:
        problems.append(f"{where}: legend {target.legend!r} lacks a label in {lacking[0]}")
    if shown and target.panel_type == "timeseries":
        legends = [LEGEND_LABEL.sub(lambda m: labels.get(m.group(1), ""), target.legend) for labels in got]
        if len(set(legends)) != len(legends):
            problems.append(f"{where}: series share a legend: {sorted(legends)[:4]}")
    return problems
