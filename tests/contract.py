"""The static half of "what ships together works together": which labels each dashboard and rule needs from
which metric, checked against what the relabel rules do to real label sets.

Uses: every selector of every dashboard variable and panel target (interpolated with All values) and of every
alert/recording rule, with the labels the query needs from the series it selects: its own matchers, the
``by``/``on`` labels of the aggregations and matchings around it, label_replace/label_join sources, and the
labels its legend ({{x}}) or alert text ($labels.x) shows. Labels made by label_replace are not needed.

Probes: label sets as the exporters send them: the bench workload (DCGM, node, iptables, apiserver), metricsgw's
own /metrics and the input series of the promtool tests. Each use is run against the probes it selects, before
and after the relabel rules; ``check()`` reports, naming the dashboard panel or rule and the relabel rule (file,
index and its why-comment), a selector whose series are all dropped or no longer match, and a needed label that
the rules remove.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import yaml

from metricsgw.model import Labels, Matcher, canonical
from metricsgw.promql import parser as P
from metricsgw.rules.loader import load_rule_files
from metricsgw.rules.relabel import RuleSet
from metricsgw.telemetry import Telemetry
from testkit.workload import Workload
from tests.dashboards.grafana import (Selection, format_value, interpolate, load_dashboards, parse_label_values,
                                      targets, variable_query, variables)
from tests.shipped import ALERT_TEST_DIR, REPO, alert_rules

_LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
_TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")
_LABEL_SETTERS = {"label_replace": (1, [3]), "label_join": (1, None)}  # destination arg, source args


@dataclass(frozen=True)
class Use:
    artefact: str  # e.g. "dashboards/gpu-fleet.json panel 'Mean utilisation by node' (A)"
    metric: str
    matchers: tuple[Matcher, ...]  # without __name__
    labels: frozenset[str]  # labels the artefact needs on the selected series

    def selector(self) -> str:
        return self.metric + "{" + ", ".join(str(m) for m in self.matchers) + "}"


# ------------------------------------------------------------------------------------------ uses
def selector_uses(artefact: str, expr: str, shown: Iterable[str] = ()) -> list[Use]:
    """Every vector selector of ``expr`` with the labels the expression (and its legend/text ``shown``) needs."""
    tree = P.parse(expr)
    made = set(_labels_made(tree))
    out = []
    for vs, needed in _walk(tree, frozenset()):
        ms = P.matchers(vs)
        name = next((m.value for m in ms if m.name == "__name__" and m.op == "="), None)
        if name is None:
            continue  # a selector without a fixed name: nothing ties it to a metric's rules
        rest = tuple(m for m in ms if m.name != "__name__")
        labels = (needed | {m.name for m in rest} | set(shown)) - made
        out.append(Use(artefact, name, rest, frozenset(labels)))
    return out


def _walk(node, needed: frozenset[str]) -> Iterator[tuple[object, frozenset[str]]]:
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node, needed
    elif kind == "MatrixSelector":
        yield node.vector_selector, needed
    elif kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        yield from _walk(node.expr, needed)
    elif kind == "AggregateExpr":
        without, labels = P.grouping(node)
        yield from _walk(node.expr, needed if without else needed | set(labels))
    elif kind == "BinaryExpr":
        on, labels, _card, include = P.matching(node)
        more = set(labels) if on else set()
        yield from _walk(node.lhs, needed | more)
        yield from _walk(node.rhs, needed | more | set(include))
    elif kind == "Call":
        setter = _LABEL_SETTERS.get(node.func.name)
        more = set()
        if setter:
            sources = node.args[setter[1][0]:] if setter[1] is None else [node.args[i] for i in setter[1]]
            more = {a.val for a in sources if type(a).__name__ == "StringLiteral" and a.val}
        for arg in node.args:
            yield from _walk(arg, needed | more)


def _labels_made(node) -> Iterator[str]:
    kind = type(node).__name__
    if kind == "Call":
        if node.func.name in _LABEL_SETTERS:
            yield node.args[_LABEL_SETTERS[node.func.name][0]].val
        for arg in node.args:
            yield from _labels_made(arg)
    for attr in ("expr", "lhs", "rhs"):
        child = getattr(node, attr, None) if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr", "AggregateExpr",
                                                      "BinaryExpr") else None
        if child is not None:
            yield from _labels_made(child)


def all_value_texts(dashboard: dict) -> dict[str, str]:
    """Each variable as Grafana interpolates "All" (or a match-anything stand-in for single-value ones)."""
    return {v["name"]: format_value(v, Selection((".*",), is_all=True)) if v.get("includeAll") else ".*"
            for v in variables(dashboard)}


def dashboard_uses(dashboards: dict[str, dict] | None = None) -> list[Use]:
    out = []
    for name, d in (dashboards or load_dashboards()).items():
        texts = all_value_texts(d)
        for var in variables(d):
            if var.get("type") != "query":
                continue
            selector, label = parse_label_values(interpolate(variable_query(var), texts))
            if selector:
                out += selector_uses(f"dashboards/{name} variable ${var['name']}", selector, [label])
        for t in targets(name, d):
            where = f"dashboards/{name} panel {t.panel!r} ({t.ref_id})"
            out += selector_uses(where, interpolate(t.expr, texts), _LEGEND_LABEL.findall(t.legend))
    return out


def rule_uses() -> list[Use]:
    out = []
    for r in alert_rules():
        shown = {n for text in r.annotations.values() for n in _TEMPLATE_LABEL.findall(text)}
        out += selector_uses(r.title, r.expr, shown)
    return out


# ------------------------------------------------------------------------------------------ probes
def probe_series(nodes: int = 2) -> list[Labels]:
    """Label sets as the exporters send them (before any relabelling)."""
    out = list(_OneControlPlaneNode(nodes, seed=1).series())
    out += telemetry_series()
    for path in sorted(ALERT_TEST_DIR.glob("*.test.yml")):
        for case in yaml.safe_load(path.read_text())["tests"]:
            out += [series_labels(s["series"]) for s in case.get("input_series", [])]
    return out


class _OneControlPlaneNode(Workload):
    CONTROL_PLANE_NODES = 1  # every apiserver/etcd label set once is enough to probe with


def telemetry_series(job: str = "metricsgw", instance: str = "metricsgw:9201") -> list[Labels]:
    """metricsgw's own series as a scrape stores them; every labelled family gets one child."""
    tel = Telemetry()
    for metric in vars(tel).values():
        names = getattr(metric, "_labelnames", ())
        if names:
            metric.labels(*["probe"] * len(names))
    out = [canonical([("__name__", "up"), ("job", job), ("instance", instance)])]
    for family in tel.registry.collect():
        for s in family.samples:
            out.append(canonical([("__name__", s.name), ("job", job), ("instance", instance), *s.labels.items()]))
    return out


def series_labels(text: str) -> Labels:
    """'name{a="b", ...}' (promtool's series notation) -> labels."""
    m = re.fullmatch(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s*", text, re.S)
    pairs = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"', m.group(2) or "")
    return canonical([("__name__", m.group(1)), *((k, bytes(v, "utf-8").decode("unicode_escape")) for k, v in pairs)])


# ------------------------------------------------------------------------------------------ check
@dataclass(frozen=True)
class Problem:
    artefact: str
    relabel_rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.artefact}: {self.message} (relabel rule: {self.relabel_rule})"


def _matches(use: Use, labels: Labels) -> bool:
    lb = dict(labels)
    return lb.get("__name__") == use.metric and all(m.matches(lb.get(m.name, "")) for m in use.matchers)


def describe_rule(rules: RuleSet, i: int) -> str:
    """'rules/relabel/dcgm.yml rule 2 ("# device is always ...")': file, index in that file and its comment."""
    source = rules.sources[i]
    index = sum(1 for s in rules.sources[:i] if s == source)
    path = Path(source)
    shown = path.relative_to(REPO) if path.is_absolute() and path.is_relative_to(REPO) else path
    comment = ""
    try:
        lines = path.read_text().splitlines()
        items = [n for n, line in enumerate(lines) if line.startswith("- ")]
        if index < len(items) and items[index] and lines[items[index] - 1].startswith("#"):
            comment = f' "{lines[items[index] - 1][:90]}"'
    except OSError:
        pass
    return f"{shown} rule {index + 1}{comment}"


def _culprit(rules: RuleSet, labels: Labels, gone) -> int | None:
    """Index of the first rule after which ``gone(labels or None)`` holds."""
    current: Labels | None = labels
    for i, rule in enumerate(rules.rules):
        current = RuleSet((rule,), (rules.sources[i],)).apply(current) if current is not None else None
        if gone(current):
            return i
    return None


def check(relabel_files: list[Path], uses: list[Use], probes: list[Labels]) -> list[Problem]:
    rules = load_rule_files([str(p) for p in relabel_files])
    by_metric: dict[str, list[Labels]] = {}
    for labels in probes:
        by_metric.setdefault(dict(labels)["__name__"], []).append(labels)
    applied: dict[Labels, Labels | None] = {}
    problems = []
    for use in uses:
        raw = [lb for lb in by_metric.get(use.metric, []) if _matches(use, lb)]
        if not raw:
            problems.append(Problem(use.artefact, "-", f"no probe series for {use.selector()}: add it to the "
                                    "workload or a promtool test so the contract covers it"))
            continue
        after = [applied[lb] if lb in applied else applied.setdefault(lb, rules.apply(lb)) for lb in raw]
        kept = [out for out in after if out is not None and _matches(use, out)]
        if not kept:
            i = _culprit(rules, raw[0], lambda out: out is None or not _matches(use, out))
            problems.append(Problem(use.artefact, describe_rule(rules, i) if i is not None else "?",
                                    f"{use.selector()} selects nothing after the relabel rules"))
            continue
        for label in sorted(use.labels):
            had = [lb for lb in raw if dict(lb).get(label)]
            if had and not any(dict(out).get(label) for out in kept):
                i = _culprit(rules, had[0], lambda out: out is None or not dict(out).get(label))
                problems.append(Problem(use.artefact, describe_rule(rules, i) if i is not None else "?",
                                        f"needs label {label!r} of {use.metric}, which the relabel rules remove"))
    return problems
