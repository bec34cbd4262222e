"""What Grafana does to a dashboard before a query reaches the data source, done small.

- ``load_dashboards()``: every dashboards/*.json by file name.
- ``panels()`` / ``targets()``: walk panels (rows nest panels when collapsed) and their targets.
- ``interpolate()``: Grafana's variable syntaxes ``$var``, ``${var}``, ``${var:format}``,
  ``[[var]]``, ``[[var:format]]``; unknown names stay as they are (``$1`` in label_replace is
  not a variable), as in Grafana's template service.
- ``resolve_variables()``: pick a value for each query variable, in dashboard order (later
  variables may use earlier ones): ``allValue`` (``.*``) for multi / include-All variables,
  else the first value ``label_values(...)`` returns, after the variable's ``regex``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards"

# Grafana's built-ins, fixed for tests: 15 s scrapes, a 30 m range.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000", "__range": "30m",
            "__range_s": "1800", "__range_ms": "1800000"}

# The same alternation Grafana's template service uses (public/app/features/variables/utils.ts).
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", re.S)
_REGEX_META = re.compile(r"[\\^$*+?.()|{}\[\]/]")


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    instant: bool

    @property
    def name(self) -> str:
        return f"{self.dashboard}:{self.panel}:{self.ref_id}"


def load_dashboards(directory: Path = DASHBOARD_DIR) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside


def targets(name: str, dashboard: dict) -> list[Target]:
    out = []
    for panel in panels(dashboard):
        for t in panel.get("targets", []):
            if t.get("expr"):
                out.append(Target(name, panel.get("title", ""), t.get("refId", ""), t["expr"],
                                  bool(t.get("instant")) and not t.get("range", False)))
    return out


def _format(value: str, fmt: str | None) -> str:
    if fmt == "regex" and value != ".*":  # the All value is a regex already
        return _REGEX_META.sub(lambda m: "\\" + m.group(0), value)
    return value


def interpolate(text: str, values: dict[str, str]) -> str:
    """Replace variables Grafana would replace; leave the rest (e.g. ``$1``) untouched."""
    scope = {**BUILTINS, **values}

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in scope:
            return m.group(0)
        return _format(scope[name], fmt)

    return _VARIABLE.sub(one, text)


def _apply_regex(values: list[str], regex: str) -> list[str]:
    """A variable's ``regex`` ("/(capture)/"): keep matches, take the first group if any."""
    if not regex:
        return values
    body = regex[1:regex.rindex("/")] if regex.startswith("/") else regex
    pattern = re.compile(body)
    out = []
    for v in values:
        m = pattern.search(v)
        if m:
            picked = m.group(1) if m.groups() else v
            if picked not in out:
                out.append(picked)
    return out


def variable_query(variable: dict) -> str:
    q = variable.get("query")
    if isinstance(q, dict):
        q = q.get("query", "")
    return q or variable.get("definition", "")


def parse_label_values(query: str) -> tuple[str | None, str]:
    """``label_values(selector, label)`` -> (selector, label); ``label_values(label)`` -> (None, label)."""
    m = _LABEL_VALUES.match(query)
    if not m:
        raise ValueError(f"not a label_values() variable query: {query!r}")
    return (m.group(1).strip() if m.group(1) else None), m.group(2)


LabelValuesFn = Callable[[str, str | None], list[str]]


def resolve_variables(dashboard: dict, label_values: LabelValuesFn, use_all: bool = True) -> dict[str, str]:
    """Variable name -> the text Grafana would put in a query.

    ``label_values(label, selector)`` asks the data source (e.g. /api/v1/label/<n>/values?match[]=...).
    With ``use_all`` multi / include-All variables become their allValue; otherwise (and for
    single-value variables) the first value found. Raises when a variable has no values."""
    values: dict[str, str] = {}
    for var in dashboard.get("templating", {}).get("list", []):
        kind, name = var.get("type"), var["name"]
        if kind == "datasource":
            continue
        if kind == "custom":
            options = [o.strip() for o in var.get("query", "").split(",") if o.strip()]
        elif kind == "constant" or kind == "textbox":
            values[name] = var.get("query", "")
            continue
        elif kind == "interval":
            values[name] = BUILTINS["__rate_interval"]
            continue
        else:
            selector, label = parse_label_values(interpolate(variable_query(var), values))
            options = _apply_regex(sorted(label_values(label, selector)), var.get("regex", ""))
        if use_all and (var.get("includeAll") or var.get("multi")):
            values[name] = var.get("allValue") or ".*"
        elif options:
            values[name] = options[0]
        else:
            raise LookupError(f"variable ${name} has no values ({variable_query(var)})")
    return values
