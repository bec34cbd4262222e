"""The shape a query's answer should have on a known workload, worked out from label sets alone.

``expected_shape(expr, series, instant)`` evaluates the query's structure (selectors, functions, aggregations,
vector matching, label_replace) on the label sets of the series the server holds, without values: the result
is the label sets the answer can have and how many series it must have at least (``lo``) and may have at most
(``hi``). Value filters (``> 5``, topk) only lower ``lo`` (and topk caps ``hi`` for an instant query).

The tests feed it the series *as the exporters sent them* (the relabel rules decide only which series exist),
so a relabel rule that removes a label a panel groups by shows up as fewer series than expected.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2

from metricsgw.promql import parser as P

_SET_OPS = {"and", "or", "unless"}
_COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
_KEEPS_NAME = {"last_over_time", "sort", "sort_desc"}  # Prometheus 2.42 keeps __name__ only through these


@dataclass(frozen=True)
class Shape:
    groups: frozenset  # of frozenset((label, value), ...): the label sets the answer may hold
    lo: int  # the answer has at least this many series
    hi: int  # and at most this many

    @staticmethod
    def exact(groups) -> "Shape":
        g = frozenset(groups)
        return Shape(g, len(g), len(g))

    def filtered(self) -> "Shape":
        return Shape(self.groups, 0, self.hi)

    def relabelled(self, fn) -> "Shape":
        groups = frozenset(fn(g) for g in self.groups)
        return Shape(groups, min(self.lo, len(groups)), min(self.hi, len(groups)))


SCALAR = None


def _drop(g: frozenset, names) -> frozenset:
    return frozenset((k, v) for k, v in g if k not in names)


def _keep(g: frozenset, names) -> frozenset:
    return frozenset((k, v) for k, v in g if k in names)


def expected_shape(expr: str, series: list[dict], instant: bool) -> Shape | None:
    """None for a scalar answer."""
    return _eval(P.parse(expr), series, instant)


def _eval(node, series, instant):  # noqa: C901 - one branch per node type
    kind = type(node).__name__
    if kind in ("NumberLiteral", "StringLiteral"):
        return SCALAR
    if kind == "VectorSelector":
        ms = P.matchers(node)
        return Shape.exact(frozenset(s.items()) for s in series if all(m.matches(s.get(m.name, "")) for m in ms))
    if kind == "MatrixSelector":
        return _eval(node.vector_selector, series, instant)
    if kind in ("ParenExpr", "SubqueryExpr"):
        return _eval(node.expr, series, instant)
    if kind == "UnaryExpr":
        inner = _eval(node.expr, series, instant)
        return inner if inner is SCALAR else inner.relabelled(lambda g: _drop(g, {"__name__"}))
    if kind == "Call":
        return _call(node, series, instant)
    if kind == "AggregateExpr":
        return _aggregate(node, series, instant)
    if kind == "BinaryExpr":
        return _binary(node, series, instant)
    raise NotImplementedError(f"shape of {kind}")


def _call(node, series, instant):
    name = node.func.name
    if name in ("vector", "time", "scalar", "pi"):
        return Shape.exact([frozenset()]) if name == "vector" else SCALAR
    vectors = [a for a in (_eval(arg, series, instant) for arg in node.args) if a is not SCALAR]
    inner = vectors[0]
    if name == "label_replace":
        dst, repl, src, regex = (a.val for a in node.args[1:])
        pattern = re2.compile(f"^(?s:{regex})$")
        template = re2.sub(r"\$\{?(\w+)\}?", r"\\\1", repl)

        def replace(g):
            lb = dict(g)
            m = pattern.search(lb.get(src, ""))
            if m is None:
                return g
            value = m.expand(template)
            return frozenset({**{k: v for k, v in lb.items() if k != dst}, **({dst: value} if value else {})}.items())
        return inner.relabelled(replace)
    if name == "histogram_quantile":
        return inner.relabelled(lambda g: _drop(g, {"le", "__name__"}))
    if name in _KEEPS_NAME:
        return inner
    return inner.relabelled(lambda g: _drop(g, {"__name__"}))


def _aggregate(node, series, instant):
    inner = _eval(node.expr, series, instant)
    op = str(node.op)
    if op in ("topk", "bottomk"):
        k = int(node.param.val)
        without, labels = P.grouping(node)
        if labels:
            return inner.filtered()  # k per group: leave the count to the grouped aggregation inside
        # a range answer holds every series that was in the top k at some step
        return Shape(inner.groups, min(k, inner.lo), min(k, inner.hi) if instant else inner.hi)
    without, labels = P.grouping(node)
    if without:
        project = lambda g: _drop(g, set(labels) | {"__name__"})  # noqa: E731
    else:
        project = lambda g: _keep(g, set(labels))  # noqa: E731
    groups = frozenset(project(g) for g in inner.groups)
    lo = len(groups) if inner.lo == len(inner.groups) else (1 if inner.lo and groups else 0)
    return Shape(groups, lo, len(groups))


def _binary(node, series, instant):
    lhs, rhs = _eval(node.lhs, series, instant), _eval(node.rhs, series, instant)
    op = P.op_name(node)
    filters = op in _COMPARISONS and not P.is_bool(node)
    if lhs is SCALAR and rhs is SCALAR:
        return SCALAR
    if lhs is SCALAR or rhs is SCALAR:
        vec = lhs if rhs is SCALAR else rhs
        out = vec if filters else vec.relabelled(lambda g: _drop(g, {"__name__"}))
        return out.filtered() if filters else out
    on, labels, card, include = P.matching(node)

    def sig(g):
        return _keep(g, set(labels)) if on else _drop(g, set(labels) | {"__name__"})
    rsigs, lsigs = {sig(g) for g in rhs.groups}, {sig(g) for g in lhs.groups}
    exact = lhs.lo == len(lhs.groups) and rhs.lo == len(rhs.groups)
    if op == "or":
        groups = lhs.groups | frozenset(g for g in rhs.groups if sig(g) not in lsigs)
        return Shape(groups, max(lhs.lo, rhs.lo) if not lhs.lo == 0 else rhs.lo, len(groups))
    if op in ("and", "unless"):
        keep = (lambda g: sig(g) in rsigs) if op == "and" else (lambda g: sig(g) not in rsigs)
        groups = frozenset(g for g in lhs.groups if keep(g))
        return Shape(groups, len(groups) if exact and op == "and" else 0, len(groups))
    if card == "one-to-many":
        many, other_sigs, result = rhs, lsigs, lambda g: g
    else:
        many, other_sigs = lhs, rsigs
        if card == "many-to-one":
            result = lambda g: g if filters else _drop(g, {"__name__"})  # noqa: E731
        elif on:
            result = lambda g: g if filters else _keep(g, set(labels))  # noqa: E731
        else:
            result = lambda g: g if filters else _drop(g, set(labels) | {"__name__"})  # noqa: E731
    groups = frozenset(result(g) for g in many.groups if sig(g) in other_sigs)
    return Shape(groups, 0 if filters or not exact else len(groups), len(groups))
