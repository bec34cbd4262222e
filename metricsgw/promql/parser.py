"""Adapter over the ``promql_parser`` package (a Rust PromQL parser).

The engine walks promql_parser's own AST; this module owns everything that is awkward
about it: error texts, durations as ms, the @ modifier, operator names.
"""

from __future__ import annotations

import datetime as _dt
import re

import promql_parser as pp

from ..errors import BadData, NotSupported
from ..model import METRIC_NAME, Matcher

_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


def parse(query: str, unitless_durations: bool = True) -> "pp.Expr":
    """Parse a query; a syntax error becomes BadData worded like Prometheus's. ``unitless_durations``: a
    number is a duration in seconds (``foo[90]``, ``offset 5``), as in Prometheus 3; 2.x refuses it."""
    if not query.strip():
        raise BadData('invalid parameter "query": 1:1: parse error: no expression found in input')
    _check_durations(query, unitless_durations)
    try:
        return pp.parse(query)
    except ValueError as err:
        msg = str(err)
        if msg.startswith("unknown function with name"):
            name = msg.rsplit(" ", 1)[-1].strip("'\"")
            if name in _KNOWN_UNPARSED:
                raise NotSupported(f"function {name}()") from None
        raise BadData(f'invalid parameter "query": parse error: {msg}') from None
    except BaseException as err:  # the Rust side panics on a few inputs (pyo3 PanicException)
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        raise BadData(f'invalid parameter "query": parse error: {err}') from None


# Prometheus 3's histogram trim operators, which the parser package does not read: ``h </ 0.5`` keeps a
# histogram's observations below 0.5, ``h >/ 0.5`` those above. They bind as the comparisons do, so each
# is parsed as the comparison it starts with and told apart by its place among them (``parse_with_trims``).
TRIM_UPPER, TRIM_LOWER = "</", ">/"
_COMPARISON = re.compile(r"[<>](?!=)/?")


def parse_with_trims(query: str, unitless_durations: bool = True) -> tuple["pp.Expr", dict[int, str]]:
    """``parse``, with the trim operators read too: the tree, and the ``id`` of each BinaryExpr node that is a
    trim operator -> TRIM_UPPER or TRIM_LOWER (valid while the tree is)."""
    text = STRINGS.sub(lambda m: " " * len(m.group(0)), query)
    found = [(m.start(), m.group(0)) for m in _COMPARISON.finditer(text)]
    trims = {k: op for k, (_, op) in enumerate(found) if op in (TRIM_UPPER, TRIM_LOWER)}
    for pos, _ in (found[k] for k in trims):  # "</" -> "< ": the same length, so later positions hold
        query = query[:pos + 1] + " " + query[pos + 2:]
    node = parse(query, unitless_durations)
    if not trims:
        return node, {}
    comparisons = [n for n in _in_order(node) if isinstance(n, pp.BinaryExpr) and op_name(n) in ("<", ">")]
    return node, {id(comparisons[k]): op for k, op in trims.items()}


def _in_order(node) -> list:
    """The nodes in the order their operators appear in the query text."""
    if isinstance(node, pp.BinaryExpr):
        return [*_in_order(node.lhs), node, *_in_order(node.rhs)]
    out = [node]
    for child in children(node):  # an aggregation's parameter is written before its expression
        out += _in_order(child)
    return out


def prettify(expr: "pp.Expr") -> str:
    """Prometheus's format_query output; a panic on the Rust side is the query's fault (400)."""
    try:
        return expr.prettify()
    except BaseException as err:  # pyo3 PanicException derives from BaseException
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        raise BadData(f'invalid parameter "query": cannot format: {err}') from None


STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_RANGE_NUM = re.compile(r"\[\s*\d+(?:\.\d+)?\s*[\]:]|:\s*\d+(?:\.\d+)?\s*\]")
_NEGATIVE_AT = re.compile(r"@\s*-")
_OFFSET_NUM = re.compile(r"\boffset\s+(-?\s*\d+(?:\.\d+)?)(?![\w.])", re.IGNORECASE)


def _check_durations(query: str, unitless: bool) -> None:
    """Prometheus 2.42 requires a unit in durations ([5m], offset 1m); the parser package, as Prometheus 3,
    also takes bare numbers as seconds. Without ``unitless``, refuse them like 2.42 does."""
    text = STRINGS.sub(lambda m: " " * len(m.group(0)), query)
    if _NEGATIVE_AT.search(text):
        # (also: reading such a time from the parser package panics in its Rust code)
        raise NotSupported("@ modifier with a negative timestamp")
    if unitless:
        return
    m = _OFFSET_NUM.search(text)
    if m:
        num = m.group(1).replace(" ", "").lstrip("-")
        raise BadData(f'invalid parameter "query": parse error: unexpected number "{num}" in offset, expected duration')
    if _RANGE_NUM.search(text):
        raise BadData('invalid parameter "query": parse error: missing unit character in duration')


# Functions Prometheus 2.42 knows that the parser package does not.
pp.register_extra_functions(
    [pp.Function("holt_winters", [pp.ValueType.Matrix, pp.ValueType.Scalar, pp.ValueType.Scalar], pp.ValueType.Vector)]
)
_KNOWN_UNPARSED: set[str] = set()


def duration_ms(td: _dt.timedelta | None) -> int:
    if td is None:
        return 0
    return (td.days * 86_400_000) + td.seconds * 1000 + td.microseconds // 1000


def op_name(node: object) -> str:
    """'sum', '+', '==', 'and', ... for AggregateExpr and BinaryExpr."""
    return str(node.op)  # type: ignore[attr-defined]


def matchers(vs: "pp.VectorSelector") -> list[Matcher]:
    ms = vs.matchers
    if ms.or_matchers:
        raise NotSupported("'or' inside a label matcher set")
    out = [Matcher(m.name, _OPS[str(m.op)], m.value) for m in ms.matchers]
    if vs.name and not any(m.name == "__name__" for m in out):
        out.append(Matcher("__name__", "=", vs.name))
    return out


def names_one_metric(vs: "pp.VectorSelector") -> bool:
    """Whether the selector pins the metric name (``__name__="..."``): its series are of one metric, so their label
    sets stay distinct once the name is dropped."""
    return any(m.name == METRIC_NAME and m.op == "=" for m in matchers(vs))


def at_modifier(node: object) -> tuple[str, int] | None:
    """None, ("start", 0), ("end", 0) or ("at", ms) for a selector/subquery's @."""
    try:
        at = node.at  # type: ignore[attr-defined]
    except AttributeError:
        return None
    if at is None:
        return None
    if at.type == pp.AtModifierType.Start:
        return ("start", 0)
    if at.type == pp.AtModifierType.End:
        return ("end", 0)
    try:
        when = at.at
    except BaseException as err:  # pyo3 panics converting a pre-1970 time
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        raise NotSupported("@ modifier with a negative timestamp") from None
    delta = when - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
    return ("at", duration_ms(delta))


def is_bool(node: "pp.BinaryExpr") -> bool:
    return bool(node.modifier is not None and node.modifier.return_bool)


def matching(node: "pp.BinaryExpr") -> tuple[bool, list[str], str, list[str]]:
    """(on, labels, card, include) for a binary expression.

    card is "one-to-one", "many-to-one" (group_left), "one-to-many" (group_right) or
    "many-to-many" (set operators)."""
    mod = node.modifier
    if mod is None:
        return False, [], "one-to-one", []
    fill = mod.fill_values  # 3.x's experimental fill(), fill_left(), fill_right(); (None, None) when absent
    if fill is not None and (fill.lhs, fill.rhs) != (None, None):
        raise NotSupported("fill() modifiers of binary operators")
    on, labels = False, []
    if mod.matching is not None:
        on = mod.matching.type == pp.LabelModifierType.Include
        labels = list(mod.matching.labels)
    card = {
        "VectorMatchCardinality.OneToOne": "one-to-one",
        "VectorMatchCardinality.ManyToOne": "many-to-one",
        "VectorMatchCardinality.OneToMany": "one-to-many",
        "VectorMatchCardinality.ManyToMany": "many-to-many",
    }[str(mod.card)]
    return on, labels, card, list(mod.group_labels or [])


def grouping(node: "pp.AggregateExpr") -> tuple[bool, list[str]]:
    """(without, labels) of an aggregation."""
    mod = node.modifier
    if mod is None:
        return False, []
    return mod.type == pp.AggModifierType.Without, list(mod.labels)


def children(node) -> list:
    """The expressions directly under ``node`` (a selector has none)."""
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, pp.AggregateExpr):
        return ([node.param] if node.param is not None else []) + [node.expr]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    return []  # selectors, number and string literals


def unwrap(node):
    """The expression inside any parentheses."""
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    return node
