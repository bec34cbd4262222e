"""The lexical bounds on a query string, and the evaluator's own recursion bound."""

from __future__ import annotations

import sys

import pytest

from metricsgw.errors import BadData
from metricsgw.limits.context import QueryContext
from metricsgw.limits.query_text import QueryTextLimits, ensure_recursion_headroom, nesting_depth
from metricsgw.promql.engine import Engine
from metricsgw.promql.memsource import MemSource

LIMITS = QueryTextLimits(max_length=1000, max_depth=4, max_terms=3)


@pytest.mark.parametrize("query", [
    "sum(rate(x[5m]))",  # depth 3
    'a{job="((((((("} + b',  # brackets inside strings are text
    "a + b # ((((((((( + + + + a comment",
    'x{a!="1", b=~"2", c!~"3"}',  # matchers are not operators
    "`(((((` - b - c",  # raw string
    'up{job="unterminated',  # the parser reports it; the scan must not miscount it
])
def test_within_limits(query):
    LIMITS.check(query)


@pytest.mark.parametrize("query, needle", [
    ("(((((1)))))", "nests brackets 5 deep, over the limit of 4 (--query.max-depth)"),
    ("a{x=\"1\"}[5m:1m] + sum((((b[1m]))))", "nests brackets 5 deep"),
    ("1 + 2 - 3 * 4", "has 4 terms, over the limit of 3 (--query.max-terms)"),
    ("a and b or c unless d", "(--query.max-terms)"),
    ("- - - 1", "(--query.max-terms)"),
    ("x" * 1001, "1,001 bytes long, over the limit of 1,000 (--query.max-length)"),
    ("\"" + "é" * 501 + "\"", "(--query.max-length)"),  # bytes, not characters
])
def test_over_a_limit_names_it(query, needle):
    with pytest.raises(BadData) as err:
        LIMITS.check(query, "match[]")
    assert needle in str(err.value) and str(err.value).startswith('invalid parameter "match[]"')


def test_nesting_depth():
    assert nesting_depth("") == 0 and nesting_depth("a") == 0 and nesting_depth("())))") == 1
    assert nesting_depth("{[(x)]}") == 3


def test_the_evaluator_turns_running_out_of_stack_into_a_400():
    src = MemSource()
    src.add({"__name__": "x"}, [0], [1.0])
    engine = Engine(src)
    query = "abs(" * 400 + "x" + ")" * 400  # 5 Python frames a level: over a recursion limit of 1,000
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with pytest.raises(BadData, match="nested too deeply to evaluate"):
            engine.instant(query, 10, QueryContext())
    finally:
        sys.setrecursionlimit(old)
    # with the headroom the server sets for its limits, the same query evaluates
    ensure_recursion_headroom(QueryTextLimits())
    assert len(engine.instant(query, 10, QueryContext()).labels) == 1


def test_headroom_covers_the_deepest_admitted_query():
    src = MemSource()
    src.add({"__name__": "x"}, [0], [1.0])
    limits = QueryTextLimits()
    ensure_recursion_headroom(limits)
    depth = limits.max_depth - 1
    terms = "+".join(["x"] * (limits.max_terms - 1))
    query = "abs(" * depth + terms + ")" * depth
    limits.check(query)
    value = Engine(src).instant(query, 10, QueryContext())
    assert value.values.tolist() == [float(limits.max_terms - 1)]
