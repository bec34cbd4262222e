"""What Grafana (Prometheus data source) does to a dashboard before a query reaches the data source, done small.

- ``load_dashboards()``: every dashboards/*.json by file name.
- ``panels()`` / ``targets()``: walk panels (rows nest panels when collapsed) and their targets.
- ``resolve_variables()``: a value for each variable, in dashboard order (later variables use earlier ones):
  ``label_values(selector, label)`` asks the data source with the earlier variables interpolated into the
  selector, the variable's ``regex`` filters/captures, then a chooser picks All, one value or several.
- ``format_value()``: the Prometheus data source's ``interpolateQueryExpr``: a custom All value goes in as it is;
  multi-value / include-All variables become regex alternations ``(a|b)`` with each value escaped by
  ``prometheusSpecialRegexEscape`` (classic mode: ``\\`` and ``$^*+?.()|{}[]`` get ``\\\\`` in the query text, i.e.
  one backslash after PromQL unquotes it); single-value variables only get ``\\`` and ``'`` escaped.
- ``builtins()``: ``$__interval``, ``$__rate_interval``, ``$__range`` ... as ``createQuery`` computes them
  (``calculateInterval`` with the panel's max data points and the data source's scrape interval,
  ``adjustInterval``, ``getRateIntervalScopedVariable``: max(interval + scrape, 4 x scrape)).
- ``interpolate()``: Grafana's variable syntaxes ``$var``, ``${var}``, ``${var:format}``, ``[[var]]``,
  ``[[var:format]]``; unknown names stay as they are (``$1`` in label_replace is not a variable).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards"
SCRAPE_INTERVAL_S = 15  # the data source's timeInterval (the README's provisioning example)
RANGE_S = 1800  # the tests look at the last 30 minutes


def builtins(range_s: int = RANGE_S, max_data_points: int = 1000, scrape_s: int = SCRAPE_INTERVAL_S) -> dict[str, str]:
    interval_ms = max(_round_interval_ms(range_s * 1000 / max_data_points), scrape_s * 1000)  # calculateInterval
    interval_s = max(interval_ms / 1000, scrape_s, _safe_interval(range_s))  # adjustInterval (factor 1)
    rate_s = max(interval_s + scrape_s, 4 * scrape_s)
    return {"__interval": f"{interval_s:g}s", "__interval_ms": f"{interval_s * 1000:g}",
            "__rate_interval": f"{rate_s:g}s", "__range": f"{range_s}s", "__range_s": str(range_s),
            "__range_ms": str(range_s * 1000)}


def step_s(range_s: int = RANGE_S, max_data_points: int = 1000, scrape_s: int = SCRAPE_INTERVAL_S) -> float:
    """query.step of a range query: the adjusted interval."""
    return float(builtins(range_s, max_data_points, scrape_s)["__interval"][:-1])


def _safe_interval(range_s: float) -> float:
    safe = range_s / 11000  # Prometheus refuses more than 11,000 points per series
    return math.ceil(safe) if safe > 1 else safe


_LADDER_MS = ((10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000),
              (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000), (45000, 30000),
              (90000, 60000), (210000, 120000), (450000, 300000), (750000, 600000), (1050000, 900000),
              (1500000, 1200000), (2700000, 1800000), (5400000, 3600000))


def _round_interval_ms(ms: float) -> int:
    """rangeutil.roundInterval (up to an hour, which is all a 30-minute range needs)."""
    for below, rounded in _LADDER_MS:
        if ms < below:
            return rounded
    return 3600000


BUILTINS = builtins()

# The same alternation Grafana's template service uses (public/app/features/variables/utils.ts).
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", re.S)
_REGEX_META = re.compile(r"[\\^$*+?.()|{}\[\]/]")  # @grafana/data escapeRegex (explicit :regex format)
_PROM_REGEX_META = re.compile(r"[$^*{}\[\]+?.()|]")  # prometheusSpecialRegexEscape, classic mode


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    instant: bool
    legend: str = ""
    panel_type: str = ""
    width: int = 24  # gridPos.w, of 24 columns

    @property
    def name(self) -> str:
        return f"{self.dashboard}:{self.panel}:{self.ref_id}"

    @property
    def max_data_points(self) -> int:
        """Grafana asks for about one point per pixel of the panel (a 1920-pixel-wide dashboard here)."""
        return max(1, round(self.width / 24 * 1920))


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
                                  bool(t.get("instant")) and not t.get("range", False), t.get("legendFormat", ""),
                                  panel.get("type", ""), panel.get("gridPos", {}).get("w", 24)))
    return out


def variables(dashboard: dict) -> list[dict]:
    return [v for v in dashboard.get("templating", {}).get("list", []) if v.get("type") != "datasource"]


# ------------------------------------------------------------------------------------------ formatting
def prometheus_regular_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\\\'")


def prometheus_special_regex_escape(value: str) -> str:
    return _PROM_REGEX_META.sub(lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


@dataclass(frozen=True)
class Selection:
    """What the user picked: some values, or All (then ``values`` are all the options)."""
    values: tuple[str, ...]
    is_all: bool = False


def format_value(var: dict, sel: Selection) -> str:
    """The text the Prometheus data source puts in a query for this variable (interpolateQueryExpr)."""
    if sel.is_all and var.get("allValue"):
        return var["allValue"]  # a custom All value is not escaped
    if not var.get("multi") and not var.get("includeAll"):
        return prometheus_regular_escape(sel.values[0])
    escaped = [prometheus_special_regex_escape(v) for v in sel.values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _explicit_format(value: str, fmt: str | None) -> str:
    if fmt == "regex" and value != ".*":  # the All value is a regex already
        return _REGEX_META.sub(lambda m: "\\" + m.group(0), value)
    return value


def interpolate(text: str, values: dict[str, str], scope_builtins: dict[str, str] | None = None) -> str:
    """Replace variables Grafana would replace (``values`` already formatted); leave the rest (e.g. ``$1``)."""
    scope = {**(scope_builtins or BUILTINS), **values}

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in scope:
            return m.group(0)
        return _explicit_format(scope[name], fmt)

    return _VARIABLE.sub(one, text)


# ------------------------------------------------------------------------------------------ variables
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
Chooser = Callable[[dict, list[str]], Selection]


def choose_all(var: dict, options: list[str]) -> Selection:
    if var.get("includeAll"):
        return Selection(tuple(options), is_all=True)
    return choose_first(var, options)


def choose_first(var: dict, options: list[str]) -> Selection:
    return Selection((options[0],))


def choose_two(var: dict, options: list[str]) -> Selection:
    """Two values of a multi-value variable (one where only one exists or the variable is single-value)."""
    return Selection(tuple(options[:2] if var.get("multi") else options[:1]))


def resolve_selections(dashboard: dict, label_values: LabelValuesFn, choose: Chooser = choose_all,
                       ) -> tuple[dict[str, Selection], dict[str, str]]:
    """(selection per variable, formatted text per variable). Raises LookupError when a variable has no values."""
    picked: dict[str, Selection] = {}
    texts: dict[str, str] = {}
    for var in variables(dashboard):
        kind, name = var.get("type"), var["name"]
        if kind in ("constant", "textbox"):
            texts[name] = var.get("query", "")
            continue
        if kind == "interval":
            texts[name] = BUILTINS["__rate_interval"]
            continue
        if kind == "custom":
            options = [o.strip() for o in var.get("query", "").split(",") if o.strip()]
        else:
            selector, label = parse_label_values(interpolate(variable_query(var), texts))
            options = _apply_regex(sorted(label_values(label, selector)), var.get("regex", ""))
        if not options:
            raise LookupError(f"variable ${name} has no values ({interpolate(variable_query(var), texts)})")
        picked[name] = choose(var, options)
        texts[name] = format_value(var, picked[name])
    return picked, texts


def resolve_variables(dashboard: dict, label_values: LabelValuesFn, use_all: bool = True) -> dict[str, str]:
    """Variable name -> the text Grafana would put in a query: All where offered (``use_all``), else the first value."""
    return resolve_selections(dashboard, label_values, choose_all if use_all else choose_first)[1]
