"""How far back in time a query's value at one step looks: what a late sample at time t can change.

A range query's steps are evaluated independently, each from the samples in a window that ends at the step.
``reach_ms`` is the widest such window: a sample at time t changes only steps in [t, t + reach]. It is what the
results cache (results_cache.py) needs to drop exactly the cached steps a late sample touches, and the steps
whose windows reach past retention. A query whose value at a step depends on anything but that window is not
cacheable (None): an ``@`` modifier (it looks at a fixed time, or at the query's own start or end) and a
negative offset (it looks after the step, where samples are still arriving).
"""

from __future__ import annotations

import promql_parser as pp

from . import parser


def reach_ms(node, lookback_ms: int, subquery_step_ms: int) -> int | None:
    """The widest window (ms) any step of ``node`` reads, or None when the query is not cacheable."""
    if isinstance(node, pp.VectorSelector):
        return _shifted(node, lookback_ms)
    if isinstance(node, pp.MatrixSelector):
        return _shifted(node.vector_selector, parser.duration_ms(node.range))
    if isinstance(node, pp.SubqueryExpr):
        inner = reach_ms(node.expr, lookback_ms, subquery_step_ms)
        return None if inner is None else _shifted(node, parser.duration_ms(node.range) + inner)
    children = parser.children(node)
    reaches = [reach_ms(c, lookback_ms, subquery_step_ms) for c in children]
    if any(r is None for r in reaches):
        return None
    return max(reaches, default=0)


def _shifted(node, window_ms: int) -> int | None:
    if parser.at_modifier(node) is not None:
        return None
    offset = parser.duration_ms(node.offset)
    return None if offset < 0 else offset + window_ms
