"""What a PromQL expression reads: for each vector selector, the ``__name__`` matchers that pick its metrics and
the labels the expression reads from the series it selects.

A label is read when a matcher names it, when a ``by``/``without`` grouping or an ``on``/``ignoring``/
``group_left``/``group_right`` matching around the selector names it (a match of two vectors without ``on``
reads every label but those ignored: ``EVERY_LABEL``), when label_replace/label_join take it as a
source, or when a legend (``{{x}}``) or an alert's text (``$labels.x``) shows it. ``shows_all`` says whether
labels the expression does not name can still reach its output (no ``by`` aggregation above the selector; topk and
the other aggregations that pick series keep them whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from ..errors import BadData, NotSupported
from ..model import Matcher
from ..promql import parser as P

EVERY_LABEL = "*"  # in Read.labels: the query reads every label of the series (a match on all of them)
_SELECTING = frozenset({"topk", "bottomk", "limitk", "limit_ratio"})
_SETTERS = {"label_replace": (1, slice(3, 4)), "label_join": (1, slice(3, None))}  # destination, sources


@dataclass(frozen=True)
class Read:
    """One selector of one query."""
    query: str  # where the query is, e.g. "dashboards/gpu-fleet.json panel 'GPUs reporting' (A)"
    names: tuple[Matcher, ...]  # its __name__ matchers; none means every metric
    labels: frozenset[str]  # labels the query reads from the series it selects
    shows_all: bool  # labels it does not name may reach its output
    whole_series: bool = True  # False for label_values(label): one label of every series, no metric's samples

    def reads_metric(self, metric: str) -> bool:
        return all(m.matches(metric) for m in self.names)


@dataclass(frozen=True)
class Unparsed:
    query: str
    expr: str
    error: str


@dataclass
class Usage:
    reads: list[Read]
    unparsed: list[Unparsed]

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.reads + other.reads, self.unparsed + other.unparsed)

    def of(self, metric: str) -> list[Read]:
        """The reads of a metric's series (label_values(label) included)."""
        return [r for r in self.reads if r.reads_metric(metric)]

    def is_read(self, metric: str) -> bool:
        return any(r.whole_series and r.reads_metric(metric) for r in self.reads)

    def queries(self) -> set[str]:
        return {r.query for r in self.reads} | {u.query for u in self.unparsed}


def expr_usage(query: str, expr: str, shown: Iterable[str] = (), shows_all: bool = True) -> Usage:
    """The reads of one expression (``shows_all=False``: only the ``shown`` labels of its answer are looked at, as
    Grafana's label_values); one it cannot parse is returned as Unparsed, never dropped."""
    try:
        tree = P.parse(expr)
        found = list(_walk(tree, frozenset(shown), shows_all))
    except (BadData, NotSupported) as err:
        return Usage([], [Unparsed(query, expr, str(err))])
    reads = []
    for vs, labels, shows_all in found:
        ms = P.matchers(vs)
        names = tuple(m for m in ms if m.name == "__name__")
        read = labels | {m.name for m in ms if m.name != "__name__"}
        reads.append(Read(query, names, frozenset(read), shows_all))
    return Usage(reads, [])


def _is_scalar(node) -> bool:
    kind = type(node).__name__
    if kind in ("NumberLiteral", "StringLiteral"):
        return True
    if kind in ("ParenExpr", "UnaryExpr"):
        return _is_scalar(node.expr)
    if kind == "Call":
        return str(node.func.return_type) == "ValueType.Scalar"
    if kind == "BinaryExpr":
        return _is_scalar(node.lhs) and _is_scalar(node.rhs)
    return False


def _walk(node, labels: frozenset[str], shows_all: bool) -> Iterator[tuple[object, frozenset[str], bool]]:
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node, labels, shows_all
    elif kind == "MatrixSelector":
        yield node.vector_selector, labels, shows_all
    elif kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        yield from _walk(node.expr, labels, shows_all)
    elif kind == "AggregateExpr":
        without, grouped = P.grouping(node)
        # topk, bottomk, limitk and limit_ratio answer with their input series whole, whatever the grouping
        keeps = without or P.op_name(node) in _SELECTING
        if not keeps:  # a `by` aggregation hands on its grouping labels only: a match above reads those
            labels = labels - {EVERY_LABEL}
        yield from _walk(node.expr, labels | set(grouped), shows_all and keeps)
    elif kind == "BinaryExpr":
        on, matched, _card, include = P.matching(node)
        more = labels | set(matched) | set(include)
        if not on and not (_is_scalar(node.lhs) or _is_scalar(node.rhs)):
            more |= {EVERY_LABEL}  # two vectors matched on all their labels (but those ignored): each one is read
        yield from _walk(node.lhs, more, shows_all)
        yield from _walk(node.rhs, more, shows_all)
    elif kind == "Call":
        more = set(labels)
        setter = _SETTERS.get(node.func.name)
        if setter:
            more |= {a.val for a in node.args[setter[1]] if type(a).__name__ == "StringLiteral" and a.val}
        for arg in node.args:
            yield from _walk(arg, frozenset(more), shows_all)
