"""Where queries come from: Grafana dashboard JSON, Prometheus rule files and the query log
(``--query.log-file``'s JSON lines), each read into a Usage.

Grafana's variables are replaced by plausible values before parsing: its built-in intervals by durations
(``$__rate_interval`` 5m, ``$__range`` 1h, ``$__interval`` 1m...), a constant/custom/interval/textbox variable by its
current value, and any other ``$var``, ``${var}``, ``${var:fmt}`` or ``[[var]]`` by ``.*``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import yaml

from .usage import Read, Unparsed, Usage, expr_usage

BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__interval_ms": "60000",
            "__range_s": "3600", "__range_ms": "3600000", "__auto": "1m"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")
_LEGEND = re.compile(r"\{\{\s*([a-zA-Z_]\w*)\s*\}\}")
_TEMPLATE = re.compile(r"\$labels\.([a-zA-Z_]\w*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*)\s*,\s*)?([a-zA-Z_]\w*)\s*\)\s*$", re.S)
_QUERY_RESULT = re.compile(r"^\s*query_result\((.*)\)\s*$", re.S)
_METRICS = re.compile(r"^\s*metrics\((.*)\)\s*$", re.S)
_FIXED_TYPES = ("constant", "custom", "interval", "textbox")


def substitute(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return BUILTINS.get(name) or values.get(name) or ".*"
    return _VARIABLE.sub(one, text)


def dashboard_usage(path: str) -> Usage:
    name = Path(path).name
    try:
        dashboard = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        return Usage([], [Unparsed(f"dashboard {name}", "", f"cannot read: {err}")])
    dashboard = dashboard.get("dashboard", dashboard)  # the API's export wraps it
    variables = [v for v in dashboard.get("templating", {}).get("list", []) if v.get("type") != "datasource"]
    values = {v["name"]: _current(v) for v in variables if v.get("type") in _FIXED_TYPES and _current(v)}
    usage = Usage([], [])
    for var in variables:
        if var.get("type") == "query":
            usage += _variable_usage(f"{name} variable ${var['name']}", substitute(_variable_query(var), values))
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if isinstance(expr, str) and expr.strip():
                where = f"{name} panel {panel.get('title', '')!r} ({target.get('refId', '?')})"
                usage += expr_usage(where, substitute(expr, values), _LEGEND.findall(target.get("legendFormat") or ""))
    return usage


def _current(var: dict) -> str | None:
    value = (var.get("current") or {}).get("value")
    return value if isinstance(value, str) and value and not value.startswith("$") else None


def _panels(panels: list) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row keeps its panels inside


def _variable_query(var: dict) -> str:
    query = var.get("query")
    return query.get("query", "") if isinstance(query, dict) else query or var.get("definition", "")


def _variable_usage(where: str, query: str) -> Usage:
    """label_values(selector, label), label_values(label), query_result(expr), metrics(regex), or plain PromQL."""
    if m := _LABEL_VALUES.match(query):
        selector, label = m.group(1), m.group(2)
        if selector is None:  # the label of every series: it reads that label, and no metric's samples
            return Usage([Read(where, (), frozenset([label]), False, whole_series=False)], [])
        return expr_usage(where, selector, [label], shows_all=False)
    if m := _QUERY_RESULT.match(query):
        return expr_usage(where, m.group(1))
    if m := _METRICS.match(query):
        return expr_usage(where, '{__name__=~"%s"}' % m.group(1).strip().replace('"', '\\"'))
    if query.strip().startswith("label_names("):
        return Usage([], [])  # names of labels, no series read
    return expr_usage(where, query)


def rule_file_usage(path: str) -> Usage:
    name = Path(path).name
    try:
        doc = yaml.safe_load(Path(path).read_text())
        groups = doc["groups"]
    except (OSError, yaml.YAMLError, TypeError, KeyError) as err:
        return Usage([], [Unparsed(f"rule file {name}", "", f"not a Prometheus rule file: {err!r}")])
    usage = Usage([], [])
    for group in groups:
        for rule in group.get("rules", []):
            kind = "alert" if "alert" in rule else "record"
            shown = {n for text in (rule.get("annotations") or {}).values() for n in _TEMPLATE.findall(str(text))}
            usage += expr_usage(f"{name}: {kind} {rule.get(kind)}", str(rule.get("expr", "")), shown)
    return usage


def query_log_usage(path: str) -> Usage:
    """Each distinct query text of the log once, named by the first line it is on."""
    seen: dict[str, int] = {}
    bad = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                query = json.loads(line)["params"]["query"]
            except (ValueError, KeyError, TypeError):
                if line.strip():
                    bad.append(Unparsed(f"{Path(path).name} line {n}", line.strip()[:200], "not a query log line"))
                continue
            seen.setdefault(query, n)
    usage = Usage([], bad)
    for query, n in seen.items():
        usage += expr_usage(f"{Path(path).name} line {n}", query)
    return usage
